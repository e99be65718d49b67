//! The classifier: decides a [`Flow`] against a compiled [`Ruleset`].
//! Egress rules applied to the source endpoint and ingress rules applied to
//! the destination endpoint are evaluated in effective-priority order:
//! non-baseline Antrea Tiers, Admin-tier ClusterNetworkPolicies among them
//! (Tier priority 220), then AdminNetworkPolicies (a `Pass` in any of these
//! skips the rest of them), then Kubernetes NetworkPolicies (an
//! isolated endpoint with no allowing rule is dropped, and no baseline rule
//! can undo that), then Antrea's baseline Tier and the network-policy-api
//! Baseline tier; no match allows. Both directions must allow. A connection
//! that reached the Node on a port published for a local endpoint (a
//! userland proxy such as `docker-proxy` relays it) is decided as the
//! client's connection to that endpoint's port, never as the Node's own.
//! Pure and lock-free: the datapath workers and `tollgate trace` call the
//! same function.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use super::index::DirectionTable;
use super::rule::{port_protocol, CompiledRule, PolicyRef, RuleRef, ServiceMatch};
use super::{Endpoint, Ruleset};
use crate::fqdn::FqdnLookup;
use crate::model::{Direction, L7Protocol, PortProtocol, RuleAction};
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::packet::LocalSide;

/// What settled the verdict, for the metrics.
#[derive(Clone, Debug, PartialEq)]
pub enum DecidedBy {
    Rule(Arc<RuleRef>),
    K8sDefaultDrop,
    /// No rule applies, or none matched (allowed).
    NoRule,
}

/// How one direction of a flow was decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome")]
pub enum Outcome {
    /// This side is not an endpoint this node enforces for, or no rule
    /// applies to it in this direction.
    NotEnforced,
    /// Rules apply, none matched: allowed (Antrea policies do not isolate).
    NoRuleMatched,
    /// A rule matched and its action decided.
    Rule { rule: Arc<RuleRef> },
    /// Isolated by a Kubernetes NetworkPolicy and no rule allowed the flow.
    K8sDefaultDeny,
    /// Traffic from the Node to a Pod on it is always allowed (probes).
    NodeToLocalPod,
}

/// One direction's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DirectionDecision {
    pub direction: Direction,
    /// The endpoint the direction's rules apply to, if this node enforces it.
    pub endpoint: Option<Endpoint>,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The `Pass` rule that sent evaluation past the regular Tiers, if any.
    pub passed_by: Option<Arc<RuleRef>>,
}

impl DirectionDecision {
    pub fn verdict(&self) -> Verdict {
        match &self.outcome {
            Outcome::Rule { rule } => match rule.action {
                RuleAction::Drop => Verdict::Drop,
                RuleAction::Reject => Verdict::Reject,
                RuleAction::Allow | RuleAction::Pass => Verdict::Allow,
            },
            Outcome::K8sDefaultDeny => Verdict::Drop,
            Outcome::NotEnforced | Outcome::NoRuleMatched | Outcome::NodeToLocalPod => {
                Verdict::Allow
            }
        }
    }

    /// The rule that decided, if one did.
    pub fn rule(&self) -> Option<&Arc<RuleRef>> {
        match &self.outcome {
            Outcome::Rule { rule } => Some(rule),
            _ => None,
        }
    }
}

/// A rule met while deciding a flow, and whether it matched.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Consulted {
    pub rule: Arc<RuleRef>,
    pub matched: bool,
}

/// The verdict on a flow, with the rules that made it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub egress: DirectionDecision,
    pub ingress: DirectionDecision,
    /// When the flow is allowed by L7 rules: the `l7Protocols` of each
    /// deciding rule. Every request must satisfy every entry of this list
    /// (an alternative within one rule's list suffices for that rule).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub l7: Vec<Arc<[L7Protocol]>>,
    /// Whether the path to this decision read nothing of the flow but its
    /// hook (`local`), addresses, protocol and destination port or ICMP
    /// type and code: no rule with FQDN peers or a `sourcePort` was
    /// evaluated. Every flow with those fields gets this decision from
    /// this ruleset, whatever the FQDN table holds. (L7 and audited
    /// decisions are left out by [`crate::decide`], which sees both.)
    #[serde(skip)]
    pub key_only: bool,
}

impl Decision {
    /// The direction that settled the verdict: a denying one (egress
    /// first), else the one whose rule allowed (ingress first).
    pub fn deciding(&self) -> &DirectionDecision {
        if self.egress.verdict() != Verdict::Allow {
            &self.egress
        } else if self.ingress.verdict() != Verdict::Allow || self.ingress.rule().is_some() {
            &self.ingress
        } else {
            &self.egress
        }
    }
}

impl Ruleset {
    /// Decides a flow. `fqdn` answers FQDN peer membership. When the
    /// kernel named the flow's `local` side, an address of that side that
    /// no endpoint owns is the local Node's (an address the Node gained
    /// after the ruleset was compiled, an IPv6 link-local or privacy
    /// address), so policy applied to the Node covers every address it
    /// has, not only the ones known at compile time.
    pub fn classify(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> Decision {
        let flow = &self.relayed(flow);
        let (src, dst) = self.sides(flow);
        if self.node_to_local_pod(src, dst) {
            let decided = |direction, endpoint: Option<u32>| DirectionDecision {
                direction,
                endpoint: endpoint.map(|e| self.endpoints[e as usize].clone()),
                outcome: Outcome::NodeToLocalPod,
                passed_by: None,
            };
            return Decision {
                verdict: Verdict::Allow,
                egress: decided(Direction::Egress, src),
                ingress: decided(Direction::Ingress, dst),
                l7: Vec::new(),
                key_only: true,
            };
        }
        let beyond_key = Cell::new(false);
        let egress = self.evaluate(src, Direction::Egress, flow, flow.dst, fqdn, &beyond_key);
        let ingress = self.evaluate(dst, Direction::Ingress, flow, flow.src, fqdn, &beyond_key);
        let verdict = match (egress.verdict(), ingress.verdict()) {
            (Verdict::Allow, v) => v,
            (v, _) => v,
        };
        let l7 = if verdict == Verdict::Allow {
            [&egress, &ingress]
                .iter()
                .filter_map(|d| d.rule())
                .filter(|r| !r.l7.is_empty())
                .map(|r| r.l7.clone())
                .collect()
        } else {
            Vec::new()
        };
        Decision {
            verdict,
            egress,
            ingress,
            l7,
            key_only: !beyond_key.get(),
        }
    }

    /// `flow` as policy sees it. A connection to the Node on a port
    /// published for a local endpoint is the client's connection to that
    /// endpoint (an address of the client's family when it has one) at its
    /// container port: the Node relays it, from its own address, and the
    /// Node may always reach its own endpoints, so judging the relayed
    /// connection instead would let every client through. Any other flow
    /// is returned as it is.
    fn relayed(&self, flow: &Flow) -> Flow {
        let to_node = self
            .endpoint_by_ip
            .get(&flow.dst)
            .is_none_or(|e| *e == self.local_node_endpoint);
        if flow.local != Some(LocalSide::Destination) || !to_node {
            return *flow;
        }
        let (Some(protocol), Some(port)) =
            (port_protocol(&flow.transport), flow.transport.dst_port())
        else {
            return *flow;
        };
        let target = self.published.iter().find(|(p, _)| {
            p.protocol == protocol
                && p.host == port
                && p.address.is_none_or(|address| address == flow.dst)
        });
        let Some((published, addresses)) = target else {
            return *flow;
        };
        let family = |ip: &&IpAddr| ip.is_ipv4() == flow.src.is_ipv4();
        let Some(dst) = addresses.iter().find(family).or(addresses.first()) else {
            return *flow;
        };
        let transport = match flow.transport {
            Transport::Tcp { src_port, .. } => Transport::Tcp {
                src_port,
                dst_port: published.container,
            },
            Transport::Udp { src_port, .. } => Transport::Udp {
                src_port,
                dst_port: published.container,
            },
            Transport::Sctp { src_port, .. } => Transport::Sctp {
                src_port,
                dst_port: published.container,
            },
            other => other,
        };
        Flow {
            src: flow.src,
            dst: *dst,
            transport,
            local: None,
        }
    }

    /// The endpoints of the flow's source and destination, if enforced.
    fn sides(&self, flow: &Flow) -> (Option<u32>, Option<u32>) {
        let local = flow.local;
        let lookup = |ip: &IpAddr, side: LocalSide| {
            self.endpoint_by_ip
                .get(ip)
                .copied()
                .or((local == Some(side)).then_some(self.local_node_endpoint))
        };
        (
            lookup(&flow.src, LocalSide::Source),
            lookup(&flow.dst, LocalSide::Destination),
        )
    }

    fn node_to_local_pod(&self, src: Option<u32>, dst: Option<u32>) -> bool {
        src == Some(self.local_node_endpoint) && dst.is_some_and(|d| d != self.local_node_endpoint)
    }

    /// Every rule [`Ruleset::classify`] meets for `flow`, egress then
    /// ingress, each in evaluation order up to the one that decided (as
    /// `antctl trace-packet` and `cilium policy trace` list them): every
    /// rule applied to the endpoint in that direction, whether or not the
    /// index would have offered it.
    pub fn consulted(&self, flow: &Flow, fqdn: &dyn FqdnLookup) -> [Vec<Consulted>; 2] {
        let flow = &self.relayed(flow);
        let (src, dst) = self.sides(flow);
        if self.node_to_local_pod(src, dst) {
            return [Vec::new(), Vec::new()];
        }
        [
            self.consult(src, Direction::Egress, flow, flow.dst, fqdn),
            self.consult(dst, Direction::Ingress, flow, flow.src, fqdn),
        ]
    }

    /// The Kubernetes NetworkPolicies that isolate the sides of `flow` in
    /// its directions (egress of the source, ingress of the destination),
    /// each in the order they were compiled: the policies behind a
    /// [`Outcome::K8sDefaultDeny`], which a deny-all names with no rule to
    /// consult. Empty for a side no K8s policy selects, and for traffic
    /// from the Node to its own Pods (always allowed).
    pub fn isolating(&self, flow: &Flow) -> [&[PolicyRef]; 2] {
        let flow = &self.relayed(flow);
        let (src, dst) = self.sides(flow);
        if self.node_to_local_pod(src, dst) {
            return [&[], &[]];
        }
        let of = |endpoint: Option<u32>, direction: Direction| match endpoint {
            Some(e) => self.isolated_by[e as usize][match direction {
                Direction::Ingress => 0,
                Direction::Egress => 1,
            }]
            .as_slice(),
            None => &[],
        };
        [of(src, Direction::Egress), of(dst, Direction::Ingress)]
    }

    fn consult(
        &self,
        endpoint: Option<u32>,
        direction: Direction,
        flow: &Flow,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
    ) -> Vec<Consulted> {
        let mut met = Vec::new();
        let Some(endpoint) = endpoint else {
            return met;
        };
        let table = &self.tables[self.endpoint_tables[endpoint as usize] as usize];
        let table: &DirectionTable = match direction {
            Direction::Ingress => &table.ingress,
            Direction::Egress => &table.egress,
        };
        let meet = |id: &u32, met: &mut Vec<Consulted>| {
            let rule = &self.rules[*id as usize];
            let matched = self.rule_matches(rule, flow, peer, fqdn, &Cell::new(false));
            met.push(Consulted {
                rule: rule.reference.clone(),
                matched,
            });
            matched
        };
        for id in table.antrea.rules() {
            if meet(id, &mut met) {
                if self.rules[*id as usize].action() == RuleAction::Pass {
                    break;
                }
                return met;
            }
        }
        let last = match &table.k8s {
            Some(k8s) => k8s.rules(),
            None => table.baseline.rules(),
        };
        for id in last {
            if meet(id, &mut met) {
                break;
            }
        }
        met
    }

    fn evaluate(
        &self,
        endpoint: Option<u32>,
        direction: Direction,
        flow: &Flow,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
        beyond_key: &Cell<bool>,
    ) -> DirectionDecision {
        let mut decision = DirectionDecision {
            direction,
            endpoint: endpoint.map(|e| self.endpoints[e as usize].clone()),
            outcome: Outcome::NotEnforced,
            passed_by: None,
        };
        let Some(endpoint) = endpoint else {
            return decision;
        };
        let table = &self.tables[self.endpoint_tables[endpoint as usize] as usize];
        let table: &DirectionTable = match direction {
            Direction::Ingress => &table.ingress,
            Direction::Egress => &table.egress,
        };
        if table.is_empty() {
            return decision;
        }
        let port = port_protocol(&flow.transport).zip(flow.transport.dst_port());
        for id in table.antrea.candidates(port, peer) {
            let rule = &self.rules[id as usize];
            if self.rule_matches(rule, flow, peer, fqdn, beyond_key) {
                if rule.action() == RuleAction::Pass {
                    decision.passed_by = Some(rule.reference.clone());
                    break;
                }
                decision.outcome = Outcome::Rule {
                    rule: rule.reference.clone(),
                };
                return decision;
            }
        }
        if let Some(k8s) = &table.k8s {
            decision.outcome = k8s
                .candidates(port, peer)
                .map(|id| &self.rules[id as usize])
                .find(|rule| self.rule_matches(rule, flow, peer, fqdn, beyond_key))
                .map_or(Outcome::K8sDefaultDeny, |rule| Outcome::Rule {
                    rule: rule.reference.clone(),
                });
            return decision;
        }
        decision.outcome = table
            .baseline
            .candidates(port, peer)
            .map(|id| &self.rules[id as usize])
            .find(|rule| self.rule_matches(rule, flow, peer, fqdn, beyond_key))
            .map_or(Outcome::NoRuleMatched, |rule| Outcome::Rule {
                rule: rule.reference.clone(),
            });
        decision
    }

    fn rule_matches(
        &self,
        rule: &CompiledRule,
        flow: &Flow,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
        beyond_key: &Cell<bool>,
    ) -> bool {
        // Whether this rule matches can depend on the FQDN table or the
        // source port: the flow's verdict may then differ from that of
        // another flow with the same cache key.
        if !rule.peers.fqdns.is_empty() || rule.services.iter().any(ServiceMatch::has_source) {
            beyond_key.set(true);
        }
        let protocol = port_protocol(&flow.transport);
        let dst_port = flow.transport.dst_port();
        if let Some(node_ports) = &rule.node_ports {
            let hit = protocol
                .zip(dst_port)
                .is_some_and(|key| node_ports.contains(&key));
            if !hit {
                return false;
            }
        }
        if !rule.services.is_empty() {
            let named = |name: &str, proto: PortProtocol| {
                self.named_ports.get(&flow.dst).and_then(|ports| {
                    ports
                        .iter()
                        .find(|(n, p, _)| n == name && *p == proto)
                        .map(|(_, _, port)| *port)
                })
            };
            if !rule.services.iter().any(|s| s.matches(flow, named)) {
                return false;
            }
        }
        let peers = &rule.peers;
        peers.any
            || peers.addresses.iter().any(|set| set.contains(&peer))
            || peers.blocks.iter().any(|b| b.contains(peer))
            || peers
                .fqdns
                .iter()
                .any(|&i| fqdn.resolves_to(&self.fqdn_patterns[i as usize], peer))
            || peers.services.iter().any(|&(ip, proto, port)| {
                ip == flow.dst && protocol == Some(proto) && dst_port == Some(port)
            })
    }
}
