//! Compiled rules: what one Antrea or Kubernetes rule matches once its
//! selectors are resolved to addresses, and the reference that names it in
//! verdicts, `trace` output and audit lines.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::fqdn::{FqdnLookup, FqdnPattern};
use crate::model::{Direction, L7Protocol, PortProtocol, RuleAction};
use crate::packet::flow::{Flow, Transport};
use crate::selection::{AddressSet, Selection};

/// The kind of policy a rule belongs to, spelled as the audit log spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PolicyKind {
    AntreaClusterNetworkPolicy,
    AntreaNetworkPolicy,
    K8sNetworkPolicy,
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    /// A `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy.
    ClusterNetworkPolicy,
}

impl PolicyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::AntreaClusterNetworkPolicy => "AntreaClusterNetworkPolicy",
            PolicyKind::AntreaNetworkPolicy => "AntreaNetworkPolicy",
            PolicyKind::K8sNetworkPolicy => "K8sNetworkPolicy",
            PolicyKind::AdminNetworkPolicy => "AdminNetworkPolicy",
            PolicyKind::BaselineAdminNetworkPolicy => "BaselineAdminNetworkPolicy",
            PolicyKind::ClusterNetworkPolicy => "ClusterNetworkPolicy",
        }
    }
}

/// Names a policy: `AntreaClusterNetworkPolicy:name`, `AntreaNetworkPolicy:ns/name`,
/// `AdminNetworkPolicy:name`, `ClusterNetworkPolicy:name` (network-policy-api).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PolicyRef {
    pub kind: PolicyKind,
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}:{}/{}", self.kind.as_str(), ns, self.name),
            None => write!(f, "{}:{}", self.kind.as_str(), self.name),
        }
    }
}

/// Where a rule sits in the evaluation order and how it reports itself.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleRef {
    pub policy: PolicyRef,
    /// Tier name; `None` for Kubernetes NetworkPolicies; `Admin` or
    /// `Baseline` for the network-policy-api kinds (as `v1alpha2` spells it).
    pub tier: Option<String>,
    pub tier_priority: Option<i32>,
    pub policy_priority: Option<f64>,
    /// The rule's name (generated when absent); `None` for Kubernetes rules,
    /// which have no names (the audit log prints `<nil>`).
    pub name: Option<String>,
    /// Position of the rule within its policy's ingress or egress list.
    pub index: usize,
    pub direction: Direction,
    pub action: RuleAction,
    /// Whether decisions of this rule go to the audit log: `enableLogging`
    /// of an Antrea rule, or the `networkpolicy.antrea.io/enable-logging`
    /// annotation of a Kubernetes NetworkPolicy's Namespace.
    pub enable_logging: bool,
    pub log_label: Option<String>,
    /// The rule's rank in the node's evaluation order (1 = evaluated
    /// first): stable for a given set of policies. The audit log prints it
    /// where Antrea prints the OpenFlow priority.
    pub rank: u32,
    /// `l7Protocols` of the rule; empty for L3/L4 rules.
    #[serde(skip)]
    pub l7: Arc<[L7Protocol]>,
    /// The rule's policy carries [`crate::model::DRY_RUN_ANNOTATION`]: the
    /// classifier's enforced outcome never sees it, its dry-run outcome
    /// does.
    pub dry_run: bool,
}

/// One entry of a rule's `ports`/`protocols`, resolved. `source` is the
/// entry's `sourcePort`..`sourceEndPort` (inclusive): the client's port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ServiceMatch {
    /// A protocol with every destination port.
    Protocol {
        protocol: PortProtocol,
        source: Option<(u16, u16)>,
    },
    /// A destination port range (inclusive) of a protocol.
    Ports {
        protocol: PortProtocol,
        first: u16,
        last: u16,
        source: Option<(u16, u16)>,
    },
    /// A named container port, resolved against the destination Pod.
    Named {
        protocol: PortProtocol,
        name: String,
        source: Option<(u16, u16)>,
    },
    Icmp {
        icmp_type: Option<u8>,
        icmp_code: Option<u8>,
    },
    Igmp {
        igmp_type: Option<u8>,
        group: Option<Ipv4Addr>,
    },
}

/// An entry as `trace -v` names what a rule takes: `TCP/80`,
/// `UDP/53-54`, `TCP/http`, `SCTP` (every port), `ICMP type 8 code 0`,
/// `IGMP type 0x16 group 224.0.0.1`; a `sourcePort` range is added as
/// `from ports 1000-2000`.
impl fmt::Display for ServiceMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = |f: &mut fmt::Formatter<'_>, source: &Option<(u16, u16)>| match source {
            Some((first, last)) if first == last => write!(f, " from port {first}"),
            Some((first, last)) => write!(f, " from ports {first}-{last}"),
            None => Ok(()),
        };
        match self {
            ServiceMatch::Protocol {
                protocol,
                source: s,
            } => {
                write!(f, "{}", protocol.as_str())?;
                source(f, s)
            }
            ServiceMatch::Ports {
                protocol,
                first,
                last,
                source: s,
            } => {
                match first == last {
                    true => write!(f, "{}/{first}", protocol.as_str())?,
                    false => write!(f, "{}/{first}-{last}", protocol.as_str())?,
                }
                source(f, s)
            }
            ServiceMatch::Named {
                protocol,
                name,
                source: s,
            } => {
                write!(f, "{}/{name}", protocol.as_str())?;
                source(f, s)
            }
            ServiceMatch::Icmp {
                icmp_type,
                icmp_code,
            } => {
                f.write_str("ICMP")?;
                if let Some(t) = icmp_type {
                    write!(f, " type {t}")?;
                }
                if let Some(c) = icmp_code {
                    write!(f, " code {c}")?;
                }
                Ok(())
            }
            ServiceMatch::Igmp { igmp_type, group } => {
                f.write_str("IGMP")?;
                if let Some(t) = igmp_type {
                    write!(f, " type {t:#04x}")?;
                }
                if let Some(g) = group {
                    write!(f, " group {g}")?;
                }
                Ok(())
            }
        }
    }
}

/// A CIDR minus its `except` holes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Block {
    pub cidr: IpNet,
    pub except: Vec<IpNet>,
}

impl Block {
    /// Host bits are cleared, as Kubernetes does: `10.0.0.1/24` is `10.0.0.0/24`.
    pub fn new(cidr: IpNet, except: &[IpNet]) -> Block {
        Block {
            cidr: cidr.trunc(),
            except: except.iter().map(IpNet::trunc).collect(),
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.cidr.contains(&ip) && !self.except.iter().any(|e| e.contains(&ip))
    }
}

/// The other end of a rule: who may be the source (ingress) or destination
/// (egress). Address sets are shared between rules with equal selectors.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeerMatch {
    /// True when the rule has no peers: it matches every address.
    pub any: bool,
    pub addresses: Vec<Arc<AddressSet>>,
    /// The selection each of `addresses` holds the members of.
    pub selections: Vec<Selection>,
    pub blocks: Vec<Block>,
    /// Indices into `Ruleset::fqdn_patterns`.
    pub fqdns: Vec<u32>,
    /// `toServices`: ClusterIP, protocol and port together.
    pub services: Vec<(IpAddr, PortProtocol, u16)>,
}

impl PeerMatch {
    /// Whether `peer` is one of the addresses the peers name: any, an
    /// address set, a block, or an address `fqdn` says one of the rule's
    /// FQDN selectors (indices into `patterns`) resolved to.
    pub fn matches_address(
        &self,
        peer: IpAddr,
        fqdn: &dyn FqdnLookup,
        patterns: &[FqdnPattern],
    ) -> bool {
        self.any
            || self.addresses.iter().any(|set| set.contains(&peer))
            || self.blocks.iter().any(|b| b.contains(peer))
            || self
                .fqdns
                .iter()
                .any(|&i| fqdn.resolves_to(&patterns[i as usize], peer))
    }
}

/// A range of one field of a flow that a rule's match reads: where,
/// along that field, whether the rule matches can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FieldRange {
    DstPort(PortProtocol, u16, u16),
    SrcPort(PortProtocol, u16, u16),
    IcmpType(u8),
    IcmpCode(u8),
    IgmpType(u8),
    IgmpGroup(Ipv4Addr),
}

/// A rule ready to be matched against flows.
#[derive(Clone, Debug)]
pub(crate) struct CompiledRule {
    pub reference: Arc<RuleRef>,
    pub peers: PeerMatch,
    /// Empty: any protocol and port.
    pub services: Vec<ServiceMatch>,
    /// A NodePort `service` appliedTo: only traffic to these ports.
    pub node_ports: Option<Vec<(PortProtocol, u16)>>,
}

impl CompiledRule {
    /// The rule's action (`Pass` included).
    pub fn action(&self) -> RuleAction {
        self.reference.action
    }

    /// Every range of a flow's fields the classifier's match of this rule
    /// reads for flows to `dst` (its NodePorts, `ports`/`protocols` with a
    /// named port resolved by `named`, `toServices`): between two
    /// consecutive boundaries of these ranges, the rule matches every
    /// value or none.
    pub fn field_ranges(
        &self,
        dst: IpAddr,
        named: impl Fn(&str, PortProtocol) -> Option<u16>,
    ) -> Vec<FieldRange> {
        let mut out = Vec::new();
        for &(protocol, port) in self.node_ports.iter().flatten() {
            out.push(FieldRange::DstPort(protocol, port, port));
        }
        for &(ip, protocol, port) in &self.peers.services {
            if ip == dst {
                out.push(FieldRange::DstPort(protocol, port, port));
            }
        }
        for service in &self.services {
            service.field_ranges(&named, &mut out);
        }
        out
    }
}

/// Protocol of a flow as `ports` spell it.
pub(super) fn port_protocol(transport: &Transport) -> Option<PortProtocol> {
    match transport {
        Transport::Tcp { .. } => Some(PortProtocol::Tcp),
        Transport::Udp { .. } => Some(PortProtocol::Udp),
        Transport::Sctp { .. } => Some(PortProtocol::Sctp),
        _ => None,
    }
}

impl ServiceMatch {
    /// Whether the entry restricts the client's port (`sourcePort`).
    pub fn has_source(&self) -> bool {
        matches!(
            self,
            ServiceMatch::Protocol {
                source: Some(_),
                ..
            } | ServiceMatch::Ports {
                source: Some(_),
                ..
            } | ServiceMatch::Named {
                source: Some(_),
                ..
            }
        )
    }

    /// The ranges of a flow's fields this entry reads (see
    /// [`CompiledRule::field_ranges`]); a named port that `named` does
    /// not resolve reads none (it matches nothing).
    fn field_ranges(
        &self,
        named: impl Fn(&str, PortProtocol) -> Option<u16>,
        out: &mut Vec<FieldRange>,
    ) {
        let (protocol, source) = match self {
            ServiceMatch::Protocol { protocol, source } => (*protocol, source),
            ServiceMatch::Ports {
                protocol,
                first,
                last,
                source,
            } => {
                out.push(FieldRange::DstPort(*protocol, *first, *last));
                (*protocol, source)
            }
            ServiceMatch::Named {
                protocol,
                name,
                source,
            } => {
                if let Some(port) = named(name, *protocol) {
                    out.push(FieldRange::DstPort(*protocol, port, port));
                }
                (*protocol, source)
            }
            ServiceMatch::Icmp {
                icmp_type,
                icmp_code,
            } => {
                out.extend(icmp_type.map(FieldRange::IcmpType));
                out.extend(icmp_code.map(FieldRange::IcmpCode));
                return;
            }
            ServiceMatch::Igmp { igmp_type, group } => {
                out.extend(igmp_type.map(FieldRange::IgmpType));
                out.extend(group.map(FieldRange::IgmpGroup));
                return;
            }
        };
        if let Some((first, last)) = source {
            out.push(FieldRange::SrcPort(protocol, *first, *last));
        }
    }

    /// Whether the flow's transport matches; `named` resolves a named port on
    /// the destination.
    pub fn matches(&self, flow: &Flow, named: impl Fn(&str, PortProtocol) -> Option<u16>) -> bool {
        self.matches_destination(flow, named) && self.matches_source(flow)
    }

    /// Whether the flow's protocol is the entry's (any port).
    pub fn matches_protocol(&self, transport: &Transport) -> bool {
        match (self, transport) {
            (
                ServiceMatch::Protocol { protocol, .. }
                | ServiceMatch::Ports { protocol, .. }
                | ServiceMatch::Named { protocol, .. },
                t,
            ) => port_protocol(t) == Some(*protocol),
            (ServiceMatch::Icmp { .. }, Transport::Icmp { .. }) => true,
            (ServiceMatch::Igmp { .. }, Transport::Igmp { .. }) => true,
            _ => false,
        }
    }

    /// Whether the client's port is within the entry's `sourcePort` range
    /// (always, without one).
    pub fn matches_source(&self, flow: &Flow) -> bool {
        let source = match self {
            ServiceMatch::Protocol { source, .. }
            | ServiceMatch::Ports { source, .. }
            | ServiceMatch::Named { source, .. } => source,
            ServiceMatch::Icmp { .. } | ServiceMatch::Igmp { .. } => &None,
        };
        source.is_none_or(|(first, last)| {
            flow.transport
                .src_port()
                .is_some_and(|p| (first..=last).contains(&p))
        })
    }

    /// Whether the protocol and the destination port (ICMP type and code,
    /// IGMP type and group) match, whatever the client's port.
    pub fn matches_destination(
        &self,
        flow: &Flow,
        named: impl Fn(&str, PortProtocol) -> Option<u16>,
    ) -> bool {
        match (self, &flow.transport) {
            (ServiceMatch::Protocol { protocol, .. }, t) => port_protocol(t) == Some(*protocol),
            (
                ServiceMatch::Ports {
                    protocol,
                    first,
                    last,
                    ..
                },
                t,
            ) => {
                port_protocol(t) == Some(*protocol)
                    && t.dst_port().is_some_and(|p| (*first..=*last).contains(&p))
            }
            (ServiceMatch::Named { protocol, name, .. }, t) => {
                port_protocol(t) == Some(*protocol)
                    && named(name, *protocol).is_some_and(|p| t.dst_port() == Some(p))
            }
            (
                ServiceMatch::Icmp {
                    icmp_type,
                    icmp_code,
                },
                Transport::Icmp {
                    icmp_type: t,
                    icmp_code: c,
                },
            ) => icmp_type.is_none_or(|x| x == *t) && icmp_code.is_none_or(|x| x == *c),
            (
                ServiceMatch::Igmp { igmp_type, group },
                Transport::Igmp {
                    igmp_type: t,
                    group: g,
                },
            ) => igmp_type.is_none_or(|x| x == *t) && group.is_none_or(|x| x == *g),
            _ => false,
        }
    }
}
