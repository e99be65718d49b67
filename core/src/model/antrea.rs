//! Antrea-native policy CRDs (`crd.antrea.io/v1beta1`, and `v1alpha1` as the
//! spec's examples use it): Tier, ClusterNetworkPolicy, NetworkPolicy,
//! ClusterGroup and Group. Field names are exactly the spec's; unknown fields
//! are rejected when the object is parsed. Also the ExternalEntity
//! inventory object (`v1alpha2`), read leniently like the `v1` inventory.

use std::net::IpAddr;
use std::sync::OnceLock;

use ipnet::IpNet;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use super::meta::{LabelSelector, NamespacedName, ObjectMeta, PeerService};

/// The static Tiers Antrea creates, with their priorities.
pub const STATIC_TIERS: [(&str, i32); 6] = [
    ("emergency", 50),
    ("securityops", 100),
    ("networkops", 150),
    ("platform", 200),
    ("application", 250),
    ("baseline", 253),
];

/// The Tier of a policy without `tier`.
pub const DEFAULT_TIER: &str = "application";

/// Policies in this Tier are evaluated after Kubernetes NetworkPolicies.
pub const BASELINE_TIER: &str = "baseline";

/// The static Tiers' names before Antrea 0.10, in [`STATIC_TIERS`] order.
/// Antrea still admits a policy naming one of them and reads it as the
/// lowercase Tier.
pub const LEGACY_STATIC_TIERS: [&str; 6] = [
    "Emergency",
    "SecurityOps",
    "NetworkOps",
    "Platform",
    "Application",
    "Baseline",
];

/// The Tier a policy's `tier` field names: the default Tier when unset or
/// empty, a legacy capitalised static name read as the lowercase Tier.
pub fn effective_tier(tier: Option<&str>) -> &str {
    let name = tier.filter(|t| !t.is_empty()).unwrap_or(DEFAULT_TIER);
    // Every legacy name is capitalised; most names are not (each
    // assembly asks this of every Antrea policy).
    if !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return name;
    }
    match LEGACY_STATIC_TIERS
        .iter()
        .position(|legacy| *legacy == name)
    {
        Some(i) => STATIC_TIERS[i].0,
        None => name,
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tier {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: TierSpec,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierSpec {
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// An Antrea ClusterNetworkPolicy (`kind: ClusterNetworkPolicy`) or Antrea
/// NetworkPolicy (`kind: NetworkPolicy` in `crd.antrea.io`): both share the spec.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AntreaPolicy {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: PolicySpec,
    // Written by the controller that enforces the policy (Antrea's: its
    // phase, realized Nodes and conditions); nothing decides by it, so it
    // is accepted and dropped as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    pub priority: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_to: Vec<AppliedTo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<Rule>,
}

/// One entry of `appliedTo`, at policy or rule level.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliedTo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Box<LabelSelector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_entity_selector: Option<Box<LabelSelector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<Box<NamespacedName>>,
    /// A NodePort Service: the rule applies to external traffic to its node port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Box<NamespacedName>>,
}

/// The action of an Antrea-native rule. Any other value is refused when
/// decoding, as Antrea's schema refuses it (`Deny` with a hint: it is not a
/// synonym of `Drop` in Antrea).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum RuleAction {
    Allow,
    Drop,
    Reject,
    Pass,
}

impl<'de> Deserialize<'de> for RuleAction {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        match word.as_str() {
            "Allow" => Ok(RuleAction::Allow),
            "Drop" => Ok(RuleAction::Drop),
            "Reject" => Ok(RuleAction::Reject),
            "Pass" => Ok(RuleAction::Pass),
            other => {
                let hint = match other.to_ascii_lowercase().as_str() {
                    "deny" | "drop" => " (did you mean Drop?)",
                    "allow" => " (did you mean Allow?)",
                    "reject" => " (did you mean Reject?)",
                    "pass" => " (did you mean Pass?)",
                    _ => "",
                };
                Err(serde::de::Error::custom(format!(
                    "unknown action `{other}`, expected one of Allow, Drop, Reject, Pass{hint}"
                )))
            }
        }
    }
}

impl RuleAction {
    /// The lower-case form used in generated rule names.
    pub fn lowercase(self) -> &'static str {
        match self {
            RuleAction::Allow => "allow",
            RuleAction::Drop => "drop",
            RuleAction::Reject => "reject",
            RuleAction::Pass => "pass",
        }
    }
}

/// One ingress or egress rule. `from` is set on ingress rules, `to` and
/// `toServices` on egress rules.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    pub action: RuleAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied_to: Vec<AppliedTo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<Peer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<Peer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to_services: Vec<PeerService>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PolicyPort>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<PolicyProtocol>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub l7_protocols: Vec<L7Protocol>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_logging: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_label: Option<String>,
    /// Its generated names, once computed ([`Rule::generated_name`]).
    #[serde(skip)]
    pub generated: GeneratedNames,
}

/// A rule's generated names, ingress and egress, each computed at its
/// first use and carried by every clone made after: a snapshot is
/// validated, compiled and summarised from copies of the objects decoded
/// once, and each of those reads every rule's name (a SHA-1 of its Go
/// JSON). Not part of the rule's value: always equal, never serialized.
/// A rule is never changed after it is decoded, so a name once computed
/// stays its name; code that builds a rule sets its fields before asking
/// its name.
#[derive(Clone, Debug, Default)]
pub struct GeneratedNames(pub(super) [OnceLock<String>; 2]);

impl GeneratedNames {
    /// The name of `direction`, computed by `compute` at the first call.
    pub(super) fn get(&self, direction: Direction, compute: impl FnOnce() -> String) -> &str {
        let at = match direction {
            Direction::Ingress => 0,
            Direction::Egress => 1,
        };
        self.0[at].get_or_init(compute)
    }
}

impl PartialEq for GeneratedNames {
    fn eq(&self, _: &GeneratedNames) -> bool {
        true
    }
}

/// A network peer in `from` / `to`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Peer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Box<PeerNamespaces>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Box<LabelSelector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_entity_selector: Option<Box<LabelSelector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<Box<NamespacedName>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_block: Option<Box<IpBlock>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fqdn: Option<String>,
}

/// `namespaces:` advanced Namespace matching of a peer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerNamespaces {
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_: Option<NamespaceMatchType>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_labels: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum NamespaceMatchType {
    #[serde(rename = "Self")]
    SelfNamespace,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IpBlock {
    pub cidr: IpNet,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub except: Vec<IpNet>,
}

/// Transport protocols usable in `ports`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize,
)]
pub enum PortProtocol {
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

impl PortProtocol {
    /// The name as policies spell it: `TCP`, `UDP`, `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            PortProtocol::Tcp => "TCP",
            PortProtocol::Udp => "UDP",
            PortProtocol::Sctp => "SCTP",
        }
    }
}

/// A port given as a number or as a container port name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PortValue {
    Number(i32),
    Name(String),
}

/// One entry of `ports`. A missing `protocol` means TCP (kept as written:
/// the generated rule name hashes it); a missing `port` means every port of
/// that protocol. `sourcePort`..`sourceEndPort` match the client's port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<PortProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_end_port: Option<i32>,
}

impl PolicyPort {
    /// The protocol, TCP when not written.
    pub fn protocol(&self) -> PortProtocol {
        self.protocol.unwrap_or_default()
    }
}

/// One entry of `protocols`: exactly one of `icmp` / `igmp`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp: Option<IcmpProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub igmp: Option<IgmpProtocol>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IcmpProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgmpProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub igmp_type: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_address: Option<IpAddr>,
}

/// One entry of `l7Protocols`: exactly one of `http` / `tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct L7Protocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpProtocol>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsProtocol>,
}

/// HTTP request match. An absent field matches any request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// TLS ClientHello match by server name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TlsProtocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
}

/// A ClusterGroup (`kind: ClusterGroup`) or namespaced Group (`kind: Group`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AntreaGroup {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: GroupSpec,
    // Written by the controller that computes the group (Antrea's: its
    // conditions); nothing decides by it, so it is accepted and dropped
    // as it is read, as metadata's bookkeeping is.
    #[serde(default, skip_serializing)]
    pub status: IgnoredAny,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// A group of Nodes: selects Node addresses, usable wherever a
    /// ClusterGroup is (not with any other selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// ExternalEntities (alone, or with `namespaceSelector`), matched like Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_entity_selector: Option<LabelSelector>,
    /// Deprecated single form of `ipBlocks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_block: Option<IpBlock>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_blocks: Vec<IpBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_reference: Option<NamespacedName>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_groups: Vec<String>,
}

/// An ExternalEntity (`crd.antrea.io/v1alpha2`): a workload that is not a
/// Pod (a VM's interface), with labels and addresses, selected by
/// `externalEntitySelector` as Pods are by `podSelector`. Inventory, so only
/// the fields policy needs are kept and the rest of the spec is ignored.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEntity {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ExternalEntitySpec,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEntitySpec {
    #[serde(default)]
    pub endpoints: Vec<ExternalEntityEndpoint>,
    /// The ExternalNode the entity's interfaces belong to.
    #[serde(default)]
    pub external_node: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalEntityEndpoint {
    pub ip: IpAddr,
    #[serde(default)]
    pub name: Option<String>,
}

impl ExternalEntity {
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// The endpoints' addresses, duplicates removed.
    pub fn ips(&self) -> Vec<IpAddr> {
        let mut ips: Vec<IpAddr> = Vec::new();
        for endpoint in &self.spec.endpoints {
            if !ips.contains(&endpoint.ip) {
                ips.push(endpoint.ip);
            }
        }
        ips
    }
}

/// Rule direction within a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(action: RuleAction) -> Rule {
        Rule {
            action,
            name: None,
            applied_to: vec![],
            from: vec![],
            to: vec![],
            to_services: vec![],
            ports: vec![],
            protocols: vec![],
            l7_protocols: vec![],
            enable_logging: false,
            log_label: None,
            generated: Default::default(),
        }
    }

    #[test]
    fn generated_names_follow_the_spec_format() {
        let name = rule(RuleAction::Allow).effective_name(Direction::Ingress);
        assert!(name.starts_with("ingress-allow-"), "{name}");
        assert_eq!(name.len(), "ingress-allow-".len() + 7);
        assert!(name["ingress-allow-".len()..]
            .chars()
            .all(|c| c.is_ascii_hexdigit()));
        let drop = rule(RuleAction::Drop).effective_name(Direction::Egress);
        assert!(drop.starts_with("egress-drop-"), "{drop}");
    }

    #[test]
    fn generated_names_are_stable_and_content_addressed() {
        let a = rule(RuleAction::Drop);
        assert_eq!(
            a.generated_name(Direction::Ingress),
            rule(RuleAction::Drop).generated_name(Direction::Ingress)
        );
        // Changed before its name is first asked (a name once computed is
        // kept: rules are not changed after decoding).
        let mut b = rule(RuleAction::Drop);
        b.ports.push(PolicyPort {
            port: Some(PortValue::Number(80)),
            ..Default::default()
        });
        assert_ne!(
            a.generated_name(Direction::Ingress),
            b.generated_name(Direction::Ingress)
        );
    }

    #[test]
    fn given_names_win() {
        let mut r = rule(RuleAction::Pass);
        r.name = Some("PassFromSameNS".into());
        assert_eq!(r.effective_name(Direction::Ingress), "PassFromSameNS");
    }
}
