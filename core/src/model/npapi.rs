//! The Kubernetes network-policy-api kinds (`policy.networking.k8s.io`):
//! AdminNetworkPolicy and BaselineAdminNetworkPolicy (`v1alpha1`) and
//! ClusterNetworkPolicy (`v1alpha2`, tiers `Admin` and `Baseline`). Field
//! names are exactly the API's; unknown fields are refused when decoding.
//! [`NpPolicy`] is the one view of the three that validation and the
//! compiler read, so neither has to know which version it is looking at.
//! Pure data: it never resolves a selector.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::antrea::{Direction, PortProtocol, RuleAction};
use super::meta::{LabelSelector, ObjectMeta};

/// The API group of the three kinds.
pub const NPAPI_GROUP: &str = "policy.networking.k8s.io";

/// The Antrea Tier priority the Admin tier of `v1alpha2`
/// ClusterNetworkPolicies takes, as in Antrea: after the platform Tier
/// (200), before the application Tier (250). An Antrea Tier of the same
/// priority goes first.
pub const CNP_ADMIN_TIER_PRIORITY: i32 = 220;

/// The only name a BaselineAdminNetworkPolicy may have (it is a singleton).
pub const BANP_NAME: &str = "default";

/// `kind: AdminNetworkPolicy` (`v1alpha1`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdminNetworkPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: AnpSpec,
    // Written by the implementation that enforces the policy (its
    // conditions); nothing decides by it, so it is accepted and dropped
    // as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpSpec {
    pub priority: i32,
    pub subject: NpSubject,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<AnpIngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AnpEgressRule>,
}

/// `kind: BaselineAdminNetworkPolicy` (`v1alpha1`), named `default`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineAdminNetworkPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: BanpSpec,
    // Written by the implementation that enforces the policy (its
    // conditions); nothing decides by it, so it is accepted and dropped
    // as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BanpSpec {
    pub subject: NpSubject,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<AnpIngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<AnpEgressRule>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpIngressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: NpAction,
    pub from: Vec<NpPeer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<AnpPort>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpEgressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: NpAction,
    pub to: Vec<NpPeer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<AnpPort>>,
}

/// One entry of a `v1alpha1` rule's `ports`: exactly one of the three.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_number: Option<AnpPortNumber>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub named_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_range: Option<AnpPortRange>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpPortNumber {
    /// Defaults to TCP, as the CRD does.
    #[serde(default)]
    pub protocol: PortProtocol,
    pub port: i32,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnpPortRange {
    #[serde(default)]
    pub protocol: PortProtocol,
    pub start: i32,
    pub end: i32,
}

/// `kind: ClusterNetworkPolicy` in `policy.networking.k8s.io/v1alpha2`
/// (not Antrea's ClusterNetworkPolicy, which is [`super::AntreaPolicy`]).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NpClusterNetworkPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: CnpSpec,
    // Written by the implementation that enforces the policy (its
    // conditions); nothing decides by it, so it is accepted and dropped
    // as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpSpec {
    pub tier: NpTier,
    pub priority: i32,
    pub subject: NpSubject,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<CnpIngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<CnpEgressRule>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpIngressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: NpAction,
    pub from: Vec<NpPeer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<Vec<CnpProtocol>>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpEgressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: NpAction,
    pub to: Vec<NpPeer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<Vec<CnpProtocol>>,
}

/// One entry of a `v1alpha2` rule's `protocols`: exactly one field.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<CnpProtocolPorts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<CnpProtocolPorts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp: Option<CnpProtocolPorts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_named_port: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpProtocolPorts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_port: Option<CnpPort>,
}

/// A destination port: exactly one of `number` / `range`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<CnpPortRange>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CnpPortRange {
    pub start: i32,
    pub end: i32,
}

/// The Tier of a `v1alpha2` ClusterNetworkPolicy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
pub enum NpTier {
    Admin,
    Baseline,
}

impl NpTier {
    pub fn as_str(self) -> &'static str {
        match self {
            NpTier::Admin => "Admin",
            NpTier::Baseline => "Baseline",
        }
    }
}

/// A rule action of any of the three kinds; which ones a kind admits is
/// checked by validation (`Allow` is `v1alpha1`'s word for `Accept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum NpAction {
    Allow,
    Accept,
    Deny,
    Pass,
}

impl NpAction {
    pub fn as_str(self) -> &'static str {
        match self {
            NpAction::Allow => "Allow",
            NpAction::Accept => "Accept",
            NpAction::Deny => "Deny",
            NpAction::Pass => "Pass",
        }
    }

    /// The classifier's action: Allow/Accept allow, Deny drops, Pass passes.
    pub fn rule_action(self) -> RuleAction {
        match self {
            NpAction::Allow | NpAction::Accept => RuleAction::Allow,
            NpAction::Deny => RuleAction::Drop,
            NpAction::Pass => RuleAction::Pass,
        }
    }
}

/// `subject`: exactly one of `namespaces` / `pods`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NpSubject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPod>,
}

/// Pods chosen by a Namespace selector and a Pod selector together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacedPod {
    pub namespace_selector: LabelSelector,
    pub pod_selector: LabelSelector,
}

/// A peer of any rule: exactly one field. Ingress peers admit only
/// `namespaces` and `pods`; BaselineAdminNetworkPolicy has no `domainNames`
/// (validation says so).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NpPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NpNamespaces>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NpPeerPods>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<LabelSelector>,
    /// CIDRs, kept as written: validation checks them as `isCIDR` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_names: Option<Vec<String>>,
}

/// A peer's `namespaces`: a label selector, or the first `v1alpha1` shape
/// (network-policy-api v0.1.0–v0.1.1, Antrea's docs still show it), a
/// [`NamespacedPeer`]. Told apart by their keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum NpNamespaces {
    Selector(LabelSelector),
    Peer(NamespacedPeer),
}

impl<'de> Deserialize<'de> for NpNamespaces {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let peer_shape = value.as_object().is_some_and(|map| {
            ["namespaceSelector", "sameLabels", "notSameLabels"]
                .iter()
                .any(|k| map.contains_key(*k))
        });
        let decoded = if peer_shape {
            serde_json::from_value(value).map(NpNamespaces::Peer)
        } else {
            serde_json::from_value(value).map(NpNamespaces::Selector)
        };
        decoded.map_err(serde::de::Error::custom)
    }
}

/// The first `v1alpha1` shape of a Namespace peer: exactly one of a
/// selector, `sameLabels` (Namespaces whose values of these keys equal the
/// subject's Namespace's) or `notSameLabels` (Namespaces whose values do
/// not all equal them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacedPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_labels: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_same_labels: Option<Vec<String>>,
}

/// A peer's `pods`: a Namespace selector (or, in the first `v1alpha1`
/// shape, `namespaces`: a [`NamespacedPeer`]) and a Pod selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NpPeerPods {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespacedPeer>,
    pub pod_selector: LabelSelector,
}

/// Which Namespaces a peer's `namespaces` / `pods` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceMatch<'a> {
    Selector(&'a LabelSelector),
    SameLabels(&'a [String]),
    NotSameLabels(&'a [String]),
}

impl NamespacedPeer {
    pub fn matching(&self) -> Option<NamespaceMatch<'_>> {
        match (
            &self.namespace_selector,
            &self.same_labels,
            &self.not_same_labels,
        ) {
            (Some(s), None, None) => Some(NamespaceMatch::Selector(s)),
            (None, Some(keys), None) => Some(NamespaceMatch::SameLabels(keys)),
            (None, None, Some(keys)) => Some(NamespaceMatch::NotSameLabels(keys)),
            _ => None,
        }
    }
}

impl NpPeer {
    /// The Namespaces the peer's `namespaces` or `pods` selects in, if it
    /// selects Pods; `None` inside when the shape is invalid.
    pub fn namespace_match(&self) -> Option<Option<NamespaceMatch<'_>>> {
        if let Some(namespaces) = &self.namespaces {
            return Some(match namespaces {
                NpNamespaces::Selector(s) => Some(NamespaceMatch::Selector(s)),
                NpNamespaces::Peer(peer) => peer.matching(),
            });
        }
        let pods = self.pods.as_ref()?;
        Some(match (&pods.namespace_selector, &pods.namespaces) {
            (Some(s), None) => Some(NamespaceMatch::Selector(s)),
            (None, Some(peer)) => peer.matching(),
            _ => None,
        })
    }

    /// Whether what the peer selects depends on the subject's Namespace
    /// (`sameLabels` / `notSameLabels`).
    pub fn depends_on_namespace(&self) -> bool {
        matches!(
            self.namespace_match(),
            Some(Some(
                NamespaceMatch::SameLabels(_) | NamespaceMatch::NotSameLabels(_)
            ))
        )
    }

    /// The fields set, in the API's order.
    pub fn fields(&self) -> Vec<&'static str> {
        [
            ("namespaces", self.namespaces.is_some()),
            ("pods", self.pods.is_some()),
            ("nodes", self.nodes.is_some()),
            ("networks", self.networks.is_some()),
            ("domainNames", self.domain_names.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

/// Which of the three kinds an [`NpPolicy`] was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NpKind {
    AdminNetworkPolicy,
    BaselineAdminNetworkPolicy,
    ClusterNetworkPolicy,
}

/// One entry of a rule's `ports` or `protocols`, version-independent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NpPortMatch {
    /// A destination port range, inclusive (`first == last` for a number).
    /// Out-of-range values are kept as written for validation to refuse.
    Ports {
        protocol: PortProtocol,
        first: i32,
        last: i32,
    },
    /// A named container port of the destination Pod, any protocol.
    Named(String),
    /// An entry that sets no port (refused by validation).
    Empty,
}

/// One rule of any of the three kinds.
#[derive(Clone, Debug, PartialEq)]
pub struct NpRule<'a> {
    pub name: Option<&'a str>,
    pub action: NpAction,
    pub peers: &'a [NpPeer],
    /// `None` when the rule has no `ports` / `protocols`: every port.
    pub ports: Option<Vec<NpPortMatch>>,
}

/// The one view of an AdminNetworkPolicy, BaselineAdminNetworkPolicy or
/// ClusterNetworkPolicy that validation and the compiler read.
#[derive(Clone, Debug, PartialEq)]
pub struct NpPolicy<'a> {
    pub kind: NpKind,
    pub name: &'a str,
    pub metadata: &'a ObjectMeta,
    pub tier: NpTier,
    /// `None` for the BaselineAdminNetworkPolicy, which has no priority.
    pub priority: Option<i32>,
    pub subject: &'a NpSubject,
    pub ingress: Vec<NpRule<'a>>,
    pub egress: Vec<NpRule<'a>>,
}

impl NpPolicy<'_> {
    pub fn rules(&self, direction: Direction) -> &[NpRule<'_>] {
        match direction {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }
}

fn anp_ports(ports: &Option<Vec<AnpPort>>) -> Option<Vec<NpPortMatch>> {
    ports.as_ref().map(|ports| {
        ports
            .iter()
            .map(|p| match (&p.port_number, &p.named_port, &p.port_range) {
                (Some(n), _, _) => NpPortMatch::Ports {
                    protocol: n.protocol,
                    first: n.port,
                    last: n.port,
                },
                (None, Some(name), _) => NpPortMatch::Named(name.clone()),
                (None, None, Some(r)) => NpPortMatch::Ports {
                    protocol: r.protocol,
                    first: r.start,
                    last: r.end,
                },
                (None, None, None) => NpPortMatch::Empty,
            })
            .collect()
    })
}

fn cnp_ports(protocols: &Option<Vec<CnpProtocol>>) -> Option<Vec<NpPortMatch>> {
    protocols.as_ref().map(|protocols| {
        protocols
            .iter()
            .map(|p| {
                let transport = [
                    (PortProtocol::Tcp, &p.tcp),
                    (PortProtocol::Udp, &p.udp),
                    (PortProtocol::Sctp, &p.sctp),
                ]
                .into_iter()
                .find_map(|(protocol, ports)| Some((protocol, ports.as_ref()?)));
                match (transport, &p.destination_named_port) {
                    (Some((protocol, ports)), _) => {
                        match ports
                            .destination_port
                            .as_ref()
                            .map(|d| (d.number, &d.range))
                        {
                            Some((Some(n), _)) => NpPortMatch::Ports {
                                protocol,
                                first: n,
                                last: n,
                            },
                            Some((None, Some(r))) => NpPortMatch::Ports {
                                protocol,
                                first: r.start,
                                last: r.end,
                            },
                            _ => NpPortMatch::Empty,
                        }
                    }
                    (None, Some(name)) => NpPortMatch::Named(name.clone()),
                    (None, None) => NpPortMatch::Empty,
                }
            })
            .collect()
    })
}

impl AdminNetworkPolicy {
    pub fn view(&self) -> NpPolicy<'_> {
        NpPolicy {
            kind: NpKind::AdminNetworkPolicy,
            name: &self.metadata.name,
            metadata: &self.metadata,
            tier: NpTier::Admin,
            priority: Some(self.spec.priority),
            subject: &self.spec.subject,
            ingress: anp_ingress(&self.spec.ingress),
            egress: anp_egress(&self.spec.egress),
        }
    }
}

impl BaselineAdminNetworkPolicy {
    pub fn view(&self) -> NpPolicy<'_> {
        NpPolicy {
            kind: NpKind::BaselineAdminNetworkPolicy,
            name: &self.metadata.name,
            metadata: &self.metadata,
            tier: NpTier::Baseline,
            priority: None,
            subject: &self.spec.subject,
            ingress: anp_ingress(&self.spec.ingress),
            egress: anp_egress(&self.spec.egress),
        }
    }
}

fn anp_ingress(rules: &[AnpIngressRule]) -> Vec<NpRule<'_>> {
    rules
        .iter()
        .map(|r| NpRule {
            name: r.name.as_deref(),
            action: r.action,
            peers: &r.from,
            ports: anp_ports(&r.ports),
        })
        .collect()
}

fn anp_egress(rules: &[AnpEgressRule]) -> Vec<NpRule<'_>> {
    rules
        .iter()
        .map(|r| NpRule {
            name: r.name.as_deref(),
            action: r.action,
            peers: &r.to,
            ports: anp_ports(&r.ports),
        })
        .collect()
}

impl NpClusterNetworkPolicy {
    pub fn view(&self) -> NpPolicy<'_> {
        NpPolicy {
            kind: NpKind::ClusterNetworkPolicy,
            name: &self.metadata.name,
            metadata: &self.metadata,
            tier: self.spec.tier,
            priority: Some(self.spec.priority),
            subject: &self.spec.subject,
            ingress: self
                .spec
                .ingress
                .iter()
                .map(|r| NpRule {
                    name: r.name.as_deref(),
                    action: r.action,
                    peers: &r.from,
                    ports: cnp_ports(&r.protocols),
                })
                .collect(),
            egress: self
                .spec
                .egress
                .iter()
                .map(|r| NpRule {
                    name: r.name.as_deref(),
                    action: r.action,
                    peers: &r.to,
                    ports: cnp_ports(&r.protocols),
                })
                .collect(),
        }
    }
}

/// A CIDR as CEL's `isCIDR` reads it: an address, `/`, a prefix length
/// within the family (host bits may be set; they are cleared when compiled).
pub fn parse_cidr(text: &str) -> Option<IpNet> {
    let (addr, len) = text.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) || len.len() > 3 {
        return None;
    }
    IpNet::new(addr, len.parse().ok()?).ok()
}
