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
//!
//! Dry-run policies: the enforced outcome ([`Decision`]'s verdict and
//! directions) is decided as if they were absent — their rules are skipped,
//! their isolation ignored. Where a side carries any, the flow is decided a
//! second time with them enforced ([`DryRunOutcome`], what promoting every
//! dry-run policy would decide), and each direction names the dry-run rule
//! or isolation its outcome comes from ([`DryRunCause`]). The dry-run
//! outcome is only ever reported, never enforced.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

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
    /// Why it did not match, when it did not.
    pub why: Option<NoMatch>,
}

/// The first condition of a rule a flow fails, in the order the
/// classifier checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Miss {
    /// The rule is applied to a NodePort Service and the flow is not to
    /// one of its ports.
    NodePort,
    /// No entry of the rule's `ports`/`protocols` has the flow's protocol.
    Protocol,
    /// Entries of the protocol exist; none has the destination port (a
    /// named port: the destination has no such port), ICMP type and code,
    /// or IGMP type and group.
    Port,
    /// An entry takes the destination port, but not the client's port
    /// (`sourcePort`).
    SourcePort,
    /// The other side of the flow is none of the rule's peers.
    Peer,
}

/// The part of a rule a flow failed, as the classifier finds it without
/// spending time on which entry of `ports` came closest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failed {
    NodePort,
    Services,
    Peer,
}

/// Why a consulted rule did not match: the condition missed and what the
/// rule takes there (its ports, or its peers), for `trace -v`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoMatch {
    pub miss: Miss,
    /// What the rule takes in that condition: `TCP/53`, `UDP/5000-5010
    /// from ports 1000-2000`, `ICMP type 8`; `10.0.0.0/24 except
    /// 10.0.0.128/25`, `2 selected addresses (10.0.0.5, 10.0.0.6)`,
    /// `FQDN *.example.com (not resolved to the address)`, `Service
    /// 10.96.0.10 UDP/53`.
    pub wanted: Vec<String>,
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
    /// The flow decided with the dry-run policies enforced; `None` when no
    /// side of the flow carries a dry-run rule or isolation (the outcome
    /// would be this decision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<Box<DryRunOutcome>>,
}

/// Where a direction's dry-run outcome comes from: the dry-run rule that
/// decided it (or whose `Pass` sent the flow past the regular Tiers), or
/// the dry-run Kubernetes NetworkPolicy that would isolate the endpoint
/// (its default drop).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "by", rename_all = "camelCase")]
pub enum DryRunCause {
    Rule { rule: Arc<RuleRef> },
    Isolation { policy: Arc<PolicyRef> },
}

impl DryRunCause {
    /// The dry-run policy.
    pub fn policy(&self) -> &PolicyRef {
        match self {
            DryRunCause::Rule { rule } => &rule.policy,
            DryRunCause::Isolation { policy } => policy,
        }
    }
}

/// A flow decided as if every dry-run policy were enforced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DryRunOutcome {
    pub verdict: Verdict,
    pub egress: DirectionDecision,
    pub ingress: DirectionDecision,
    /// Egress then ingress: the dry-run rule or isolation the direction's
    /// outcome comes from; `None` where it is the enforced outcome.
    pub causes: [Option<DryRunCause>; 2],
    /// The allow would be subject to L7 rules.
    pub l7: bool,
    /// As [`Decision::key_only`], for both this outcome and the enforced
    /// one: every flow with the same key gets the same two outcomes.
    #[serde(skip)]
    pub key_only: bool,
}

/// A dry-run outcome whose verdict differs from the enforced one: what it
/// would be, and the direction and dry-run cause it is attributed to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DryRunChange<'a> {
    pub verdict: Verdict,
    pub direction: &'a DirectionDecision,
    pub cause: &'a DryRunCause,
}

impl DryRunOutcome {
    /// The change this outcome makes to `enforced`, if its verdict differs:
    /// attributed to a direction whose verdict changed and whose dry-run
    /// verdict is the flow's (a denying direction), egress first, else to
    /// any direction whose verdict changed. A direction's verdict changes
    /// only where a dry-run rule or isolation was met, so it has a cause.
    pub fn change(&self, enforced: &Decision) -> Option<DryRunChange<'_>> {
        if self.verdict == enforced.verdict {
            return None;
        }
        let changed: Vec<(&DirectionDecision, &DryRunCause)> = [
            (&self.egress, &enforced.egress, &self.causes[0]),
            (&self.ingress, &enforced.ingress, &self.causes[1]),
        ]
        .into_iter()
        .filter(|(dry, enforced, _)| dry.verdict() != enforced.verdict())
        .filter_map(|(dry, _, cause)| Some((dry, cause.as_ref()?)))
        .collect();
        let (direction, cause) = changed
            .iter()
            .find(|(dry, _)| dry.verdict() == self.verdict)
            .or(changed.first())
            .copied()?;
        Some(DryRunChange {
            verdict: self.verdict,
            direction,
            cause,
        })
    }

    /// The cause `trace` names beside the dry-run verdict: that of the
    /// direction that settles it (see [`Decision::deciding`]), else the
    /// other direction's; `None` when the dry-run rules met decided
    /// nothing.
    pub fn attributed(&self) -> Option<(&DirectionDecision, &DryRunCause)> {
        let deciding_egress = self.egress.verdict() != Verdict::Allow
            || !(self.ingress.verdict() != Verdict::Allow || self.ingress.rule().is_some());
        let [egress, ingress] = [
            (&self.egress, self.causes[0].as_ref()),
            (&self.ingress, self.causes[1].as_ref()),
        ];
        let order = if deciding_egress {
            [egress, ingress]
        } else {
            [ingress, egress]
        };
        order
            .into_iter()
            .find_map(|(direction, cause)| Some((direction, cause?)))
    }
}

/// Which rules an evaluation counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The enforced outcome: dry-run rules and isolation are left out.
    Enforced,
    /// The dry-run outcome: every rule and isolation counts.
    DryRun,
}

impl Decision {
    /// The decision of two directions evaluated by the rulesets of two
    /// Nodes (the source's egress, the destination's ingress), combined
    /// as [`Ruleset::classify`] combines its own: the change review's
    /// decision of a flow between Nodes. It carries no dry-run outcome.
    pub fn of(egress: DirectionDecision, ingress: DirectionDecision, key_only: bool) -> Decision {
        let verdict = combined(&egress, &ingress);
        let l7 = l7_of(verdict, &egress, &ingress);
        Decision {
            verdict,
            egress,
            ingress,
            l7,
            key_only,
            dry_run: None,
        }
    }

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
                dry_run: None,
            };
        }
        let beyond_key = Cell::new(false);
        let mode = Mode::Enforced;
        let egress = self.evaluate(src, Direction::Egress, flow, fqdn, &beyond_key, mode);
        let ingress = self.evaluate(dst, Direction::Ingress, flow, fqdn, &beyond_key, mode);
        let verdict = combined(&egress, &ingress);
        let l7 = l7_of(verdict, &egress, &ingress);
        let dry_run = self.dry_run((src, dst), flow, fqdn, [&egress, &ingress], &beyond_key);
        Decision {
            verdict,
            egress,
            ingress,
            l7,
            key_only: !beyond_key.get(),
            dry_run,
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

    /// The dry-run outcome of `flow`, when a side carries dry-run rules or
    /// isolation: each such direction evaluated with them, the others as
    /// `enforced` decided them. `enforced_beyond` is whether the enforced
    /// evaluation read beyond the key; it is left as it was.
    fn dry_run(
        &self,
        (src, dst): (Option<u32>, Option<u32>),
        flow: &Flow,
        fqdn: &dyn FqdnLookup,
        enforced: [&DirectionDecision; 2],
        enforced_beyond: &Cell<bool>,
    ) -> Option<Box<DryRunOutcome>> {
        let sides = [(src, Direction::Egress), (dst, Direction::Ingress)];
        let carries = |(endpoint, direction)| {
            self.table(endpoint, direction)
                .is_some_and(|table| table.dry_run)
        };
        if !sides.into_iter().any(carries) {
            return None;
        }
        let beyond_key = Cell::new(enforced_beyond.get());
        let [(egress, egress_cause), (ingress, ingress_cause)] = [0, 1].map(|i| match sides[i] {
            (endpoint, direction) if carries(sides[i]) => {
                let decided =
                    self.evaluate(endpoint, direction, flow, fqdn, &beyond_key, Mode::DryRun);
                let cause = self.dry_run_cause(endpoint, &decided);
                (decided, cause)
            }
            _ => (enforced[i].clone(), None),
        });
        let verdict = combined(&egress, &ingress);
        let l7 = !l7_of(verdict, &egress, &ingress).is_empty();
        Some(Box::new(DryRunOutcome {
            verdict,
            egress,
            ingress,
            causes: [egress_cause, ingress_cause],
            l7,
            key_only: !beyond_key.get(),
        }))
    }

    /// The dry-run rule or isolation a dry-run direction outcome comes
    /// from (see [`DryRunCause`]).
    fn dry_run_cause(
        &self,
        endpoint: Option<u32>,
        decided: &DirectionDecision,
    ) -> Option<DryRunCause> {
        let dry_run = |rule: &&Arc<RuleRef>| rule.dry_run;
        if let Some(rule) = decided.rule().filter(dry_run) {
            return Some(DryRunCause::Rule { rule: rule.clone() });
        }
        if let Some(rule) = decided.passed_by.as_ref().filter(dry_run) {
            return Some(DryRunCause::Rule { rule: rule.clone() });
        }
        let table = self.table(endpoint, decided.direction)?;
        if decided.outcome != Outcome::K8sDefaultDeny || table.isolated {
            return None;
        }
        let policy = self.dry_run_isolated_by[endpoint? as usize][dir_index(decided.direction)]
            .first()?
            .clone();
        Some(DryRunCause::Isolation { policy })
    }

    /// The rule table of `endpoint` in `direction`, if it is an endpoint.
    fn table(&self, endpoint: Option<u32>, direction: Direction) -> Option<&DirectionTable> {
        let table = &self.tables[self.endpoint_tables[endpoint? as usize] as usize];
        Some(match direction {
            Direction::Ingress => &table.ingress,
            Direction::Egress => &table.egress,
        })
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
            self.consult(src, Direction::Egress, flow, fqdn),
            self.consult(dst, Direction::Ingress, flow, fqdn),
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
            Some(e) => self.isolated_by[e as usize][dir_index(direction)].as_slice(),
            None => &[],
        };
        [of(src, Direction::Egress), of(dst, Direction::Ingress)]
    }

    /// The rules of the enforced outcome met in order (dry-run rules left
    /// out), up to the one that decided.
    fn consult(
        &self,
        endpoint: Option<u32>,
        direction: Direction,
        flow: &Flow,
        fqdn: &dyn FqdnLookup,
    ) -> Vec<Consulted> {
        let mut met = Vec::new();
        let Some(table) = self.table(endpoint, direction) else {
            return met;
        };
        let peer = peer_of(flow, direction);
        let meet = |id: &u32, met: &mut Vec<Consulted>| {
            let rule = &self.rules[*id as usize];
            if rule.reference.dry_run {
                return false;
            }
            let miss = self
                .failed(rule, flow, peer, fqdn, &Cell::new(false))
                .map(|failed| match failed {
                    Failed::NodePort => Miss::NodePort,
                    Failed::Services => self.service_miss(rule, flow),
                    Failed::Peer => Miss::Peer,
                });
            met.push(Consulted {
                rule: rule.reference.clone(),
                matched: miss.is_none(),
                why: miss.map(|miss| NoMatch {
                    miss,
                    wanted: self.wanted(rule, miss, peer, fqdn),
                }),
            });
            miss.is_none()
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
            Some(k8s) if table.isolated => k8s.rules(),
            _ => table.baseline.rules(),
        };
        for id in last {
            if meet(id, &mut met) {
                break;
            }
        }
        met
    }

    /// One direction of `flow` decided, counting the rules `mode` counts.
    fn evaluate(
        &self,
        endpoint: Option<u32>,
        direction: Direction,
        flow: &Flow,
        fqdn: &dyn FqdnLookup,
        beyond_key: &Cell<bool>,
        mode: Mode,
    ) -> DirectionDecision {
        let mut decision = DirectionDecision {
            direction,
            endpoint: endpoint.map(|e| self.endpoints[e as usize].clone()),
            outcome: Outcome::NotEnforced,
            passed_by: None,
        };
        let Some(table) = self.table(endpoint, direction) else {
            return decision;
        };
        // Whether to skip dry-run rules (only looked at in a table that
        // holds some), and whether the endpoint is isolated.
        let (skip_dry_run, isolated) = match mode {
            Mode::Enforced if !table.enforced => return decision,
            Mode::Enforced => (table.dry_run, table.isolated),
            Mode::DryRun if table.is_empty() => return decision,
            Mode::DryRun => (false, table.k8s.is_some()),
        };
        let counted = |rule: &&CompiledRule| !(skip_dry_run && rule.reference.dry_run);
        let peer = peer_of(flow, direction);
        let port = port_protocol(&flow.transport).zip(flow.transport.dst_port());
        for id in table.antrea.candidates(port, peer) {
            let rule = &self.rules[id as usize];
            if counted(&rule) && self.rule_matches(rule, flow, peer, fqdn, beyond_key) {
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
        if let Some(k8s) = table.k8s.as_ref().filter(|_| isolated) {
            decision.outcome = k8s
                .candidates(port, peer)
                .map(|id| &self.rules[id as usize])
                .filter(counted)
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
            .filter(counted)
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
        self.failed(rule, flow, peer, fqdn, beyond_key).is_none()
    }

    /// The first part of `rule` the flow fails (`None`: it matches). The
    /// one definition of a match: the workers and `trace` both read it;
    /// only `trace` asks which part of the ports failed.
    fn failed(
        &self,
        rule: &CompiledRule,
        flow: &Flow,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
        beyond_key: &Cell<bool>,
    ) -> Option<Failed> {
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
                return Some(Failed::NodePort);
            }
        }
        if !rule.services.is_empty() {
            let named = |name: &str, proto: PortProtocol| self.named_port_of(flow.dst, name, proto);
            if !rule.services.iter().any(|s| s.matches(flow, named)) {
                return Some(Failed::Services);
            }
        }
        let peers = &rule.peers;
        let hit = peers.matches_address(peer, fqdn, &self.fqdn_patterns)
            || peers.services.iter().any(|&(ip, proto, port)| {
                ip == flow.dst && protocol == Some(proto) && dst_port == Some(port)
            });
        (!hit).then_some(Failed::Peer)
    }

    /// The port the destination's container port `name` of `protocol` is.
    fn named_port_of(&self, dst: IpAddr, name: &str, protocol: PortProtocol) -> Option<u16> {
        self.named_ports.get(dst, name, protocol)
    }

    /// Which part of `ports`/`protocols` a flow no entry takes fails.
    fn service_miss(&self, rule: &CompiledRule, flow: &Flow) -> Miss {
        let named = |name: &str, proto: PortProtocol| self.named_port_of(flow.dst, name, proto);
        if !rule
            .services
            .iter()
            .any(|s| s.matches_protocol(&flow.transport))
        {
            Miss::Protocol
        } else if rule
            .services
            .iter()
            .any(|s| s.matches_destination(flow, named))
        {
            Miss::SourcePort
        } else {
            Miss::Port
        }
    }

    /// What `rule` takes where a flow to or from `peer` missed it (see
    /// [`NoMatch::wanted`]).
    fn wanted(
        &self,
        rule: &CompiledRule,
        miss: Miss,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
    ) -> Vec<String> {
        match miss {
            Miss::NodePort => rule
                .node_ports
                .iter()
                .flatten()
                .map(|(protocol, port)| format!("{}/{port}", protocol.as_str()))
                .collect(),
            Miss::Protocol | Miss::Port | Miss::SourcePort => {
                rule.services.iter().map(ToString::to_string).collect()
            }
            Miss::Peer => {
                let peers = &rule.peers;
                let mut wanted: Vec<String> = peers
                    .blocks
                    .iter()
                    .map(|b| match b.except.as_slice() {
                        [] => b.cidr.to_string(),
                        holes => {
                            let holes: Vec<String> =
                                holes.iter().map(ToString::to_string).collect();
                            format!("{} except {}", b.cidr, holes.join(", "))
                        }
                    })
                    .collect();
                let mut selected: Vec<IpAddr> =
                    peers.addresses.iter().flat_map(|set| set.iter()).collect();
                selected.sort();
                selected.dedup();
                match selected.len() {
                    0 if !peers.addresses.is_empty() => {
                        wanted.push("selectors that select no address".into())
                    }
                    0 => {}
                    n => {
                        let shown: Vec<String> =
                            selected.iter().take(3).map(ToString::to_string).collect();
                        let more = if n > 3 { ", ..." } else { "" };
                        let noun = if n == 1 { "address" } else { "addresses" };
                        wanted.push(format!("{n} selected {noun} ({}{more})", shown.join(", ")));
                    }
                }
                for &i in &peers.fqdns {
                    let pattern = &self.fqdn_patterns[i as usize];
                    let learned = fqdn.resolves_to(pattern, peer);
                    wanted.push(match learned {
                        true => format!("FQDN {pattern}"),
                        false => format!("FQDN {pattern} (not known to resolve to {peer})"),
                    });
                }
                for (ip, protocol, port) in &peers.services {
                    wanted.push(format!("Service {ip} {}/{port}", protocol.as_str()));
                }
                wanted
            }
        }
    }
}

/// The verdict of both directions: egress first, then ingress.
fn combined(egress: &DirectionDecision, ingress: &DirectionDecision) -> Verdict {
    match (egress.verdict(), ingress.verdict()) {
        (Verdict::Allow, v) => v,
        (v, _) => v,
    }
}

/// The `l7Protocols` an allowed flow is subject to: those of each deciding
/// rule that has some.
fn l7_of(
    verdict: Verdict,
    egress: &DirectionDecision,
    ingress: &DirectionDecision,
) -> Vec<Arc<[L7Protocol]>> {
    if verdict != Verdict::Allow {
        return Vec::new();
    }
    [egress, ingress]
        .iter()
        .filter_map(|d| d.rule())
        .filter(|r| !r.l7.is_empty())
        .map(|r| r.l7.clone())
        .collect()
}

/// The peer of `direction`'s rules: the destination of egress, the source
/// of ingress.
fn peer_of(flow: &Flow, direction: Direction) -> IpAddr {
    match direction {
        Direction::Egress => flow.dst,
        Direction::Ingress => flow.src,
    }
}

/// Position of a direction in the per-endpoint `[ingress, egress]` pairs.
fn dir_index(direction: Direction) -> usize {
    match direction {
        Direction::Ingress => 0,
        Direction::Egress => 1,
    }
}
