//! Peer selections: the normal form of "which Pods, Nodes or
//! ExternalEntities does this peer pick" ([`Selection`]), what an
//! inventory member is reduced to for it ([`PodEntry`], [`NodeEntry`],
//! [`ExternalEntry`]), and the index that keeps each selection's addresses
//! as the inventory changes ([`Selections`]).
//!
//! A selection names its members by labels and Namespaces only, never by
//! a policy: `namespaces: {match: Self}` is normalised to the context
//! Namespace by name, `sameLabels` to a Namespace selector on the
//! context's values, a group's `serviceReference` to the Service's
//! selector. Two peers that select the same members have the same
//! selection and share one address set. Pure: no I/O, no clock; it never
//! decides a flow and never reads a policy.

mod addresses;
mod delta;
mod directory;
pub mod group;
mod index;
mod membership;
mod publish;

use std::net::IpAddr;

use ipnet::IpNet;

use serde::Serialize;

use crate::model::{ExternalEntity, LabelSelector, Node, Pod, PortProtocol};

pub use addresses::AddressSet;
pub use delta::{members, Delta};
pub use directory::{NamedPorts, Names};
pub use index::Selections;
pub use publish::{member_of, node_member, Publisher, Write};

pub use crate::model::Labels;

/// A named container port: name, protocol, number.
pub type NamedPort = (String, PortProtocol, u16);

/// Which Namespaces a selection looks in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NamespaceScope {
    /// Every Namespace.
    All,
    /// These Namespaces, by name (sorted, once each).
    Names(Vec<String>),
    /// The Namespaces whose labels (with `kubernetes.io/metadata.name`)
    /// the selector matches.
    Selector(LabelSelector),
}

impl NamespaceScope {
    /// One Namespace by name.
    pub fn named(name: &str) -> NamespaceScope {
        NamespaceScope::Names(vec![name.to_string()])
    }

    /// These Namespaces, in the normal form (sorted, once each).
    pub fn names<'a>(names: impl IntoIterator<Item = &'a str>) -> NamespaceScope {
        let mut names: Vec<String> = names.into_iter().map(str::to_string).collect();
        names.sort_unstable();
        names.dedup();
        NamespaceScope::Names(names)
    }

    /// Whether Namespace `name`, labelled `labels` (`None`: not known),
    /// is in the scope.
    pub fn contains(&self, name: &str, labels: Option<&Labels>) -> bool {
        match self {
            NamespaceScope::All => true,
            NamespaceScope::Names(names) => {
                names.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
            }
            NamespaceScope::Selector(selector) => labels.is_some_and(|l| selector.matches(l)),
        }
    }

    /// Whether the scope depends on Namespace labels.
    pub fn reads_labels(&self) -> bool {
        matches!(self, NamespaceScope::Selector(_))
    }
}

/// The members a peer selects, in normal form; its serialized form is the
/// canonical one a published group's key is computed from ([`group::key`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Selection {
    /// Pods in `namespaces` whose labels `pods` matches (every Pod there
    /// when `None`).
    Pods {
        namespaces: NamespaceScope,
        pods: Option<LabelSelector>,
    },
    /// Pods running a ServiceAccount.
    ServiceAccount { namespace: String, name: String },
    /// Nodes whose labels the selector matches.
    Nodes(LabelSelector),
    /// ExternalEntities in `namespaces` whose labels `selector` matches.
    ExternalEntities {
        namespaces: NamespaceScope,
        selector: LabelSelector,
    },
}

/// What kind of inventory member a selection picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberKind {
    Pod,
    Node,
    Entity,
}

impl Selection {
    pub(crate) fn member_kind(&self) -> MemberKind {
        match self {
            Selection::Pods { .. } | Selection::ServiceAccount { .. } => MemberKind::Pod,
            Selection::Nodes(_) => MemberKind::Node,
            Selection::ExternalEntities { .. } => MemberKind::Entity,
        }
    }

    /// Whether the selection's members depend on Namespace labels.
    pub fn reads_namespace_labels(&self) -> bool {
        match self {
            Selection::Pods { namespaces, .. } | Selection::ExternalEntities { namespaces, .. } => {
                namespaces.reads_labels()
            }
            _ => false,
        }
    }

    /// Whether `pod`, in a Namespace labelled `ns_labels`, is a member.
    pub fn matches_pod(&self, pod: &PodEntry, ns_labels: Option<&Labels>) -> bool {
        match self {
            Selection::Pods { namespaces, pods } => {
                namespaces.contains(&pod.namespace, ns_labels)
                    && pods.as_ref().is_none_or(|s| s.matches(&pod.labels))
            }
            Selection::ServiceAccount { namespace, name } => {
                pod.namespace == *namespace && pod.service_account == *name
            }
            _ => false,
        }
    }

    /// Whether `node` is a member.
    pub fn matches_node(&self, node: &NodeEntry) -> bool {
        matches!(self, Selection::Nodes(selector) if selector.matches(&node.labels))
    }

    /// Whether `entity`, in a Namespace labelled `ns_labels`, is a member.
    pub fn matches_entity(&self, entity: &ExternalEntry, ns_labels: Option<&Labels>) -> bool {
        match self {
            Selection::ExternalEntities {
                namespaces,
                selector,
            } => {
                namespaces.contains(&entity.namespace, ns_labels)
                    && selector.matches(&entity.labels)
            }
            _ => false,
        }
    }
}

/// One Pod, reduced to what policy needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub ips: Vec<IpAddr>,
    pub service_account: String,
    pub node_name: Option<String>,
    pub named_ports: Vec<NamedPort>,
    /// Ports published on the Node (`hostPort`).
    pub host_ports: Vec<HostPort>,
}

/// A container port published on the Node's port `host` (Kubernetes
/// `hostPort`, Docker's `-p`), on every Node address or on `address`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub protocol: PortProtocol,
    pub host: u16,
    pub address: Option<IpAddr>,
    pub container: u16,
}

impl PodEntry {
    pub fn of(pod: &Pod) -> PodEntry {
        let named_ports = pod
            .spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter_map(|p| {
                let name = p.name.clone()?;
                let port = u16::try_from(p.container_port).ok()?;
                Some((name, p.protocol, port))
            })
            .collect();
        let host_ports = pod
            .spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter())
            .filter_map(|p| {
                Some(HostPort {
                    protocol: p.protocol,
                    host: u16::try_from(p.host_port?).ok().filter(|h| *h != 0)?,
                    address: match p.host_ip.as_deref().map(str::parse::<IpAddr>) {
                        None => None,
                        Some(Ok(ip)) if ip.is_unspecified() => None,
                        Some(Ok(ip)) => Some(ip),
                        // Unreadable: published nowhere the agent can tell.
                        Some(Err(_)) => return None,
                    },
                    container: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        PodEntry {
            namespace: pod.namespace().to_string(),
            name: pod.metadata.name.clone(),
            labels: pod.metadata.labels.clone(),
            ips: pod.ips(),
            service_account: pod.service_account().to_string(),
            node_name: pod.spec.node_name.clone().filter(|n| !n.is_empty()),
            named_ports,
            host_ports,
        }
    }

    /// Whether the Pod is enforced on Node `node`: scheduled there, or
    /// unscheduled (standalone inventories usually leave `nodeName` out).
    pub fn is_on(&self, node: &str) -> bool {
        self.node_name.as_deref().is_none_or(|n| n == node)
    }
}

/// One Node: its labels, addresses and Pod address ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEntry {
    pub name: String,
    pub labels: Labels,
    pub ips: Vec<IpAddr>,
    pub pod_cidrs: Vec<IpNet>,
}

impl NodeEntry {
    pub fn of(node: &Node) -> NodeEntry {
        NodeEntry {
            name: node.metadata.name.clone(),
            labels: node.metadata.labels.clone(),
            ips: node.ips(),
            pod_cidrs: node.pod_cidrs(),
        }
    }
}

/// One ExternalEntity: matched like a Pod, by labels within a Namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalEntry {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub ips: Vec<IpAddr>,
    pub external_node: Option<String>,
}

impl ExternalEntry {
    pub fn of(entity: &ExternalEntity) -> ExternalEntry {
        ExternalEntry {
            namespace: entity.namespace().to_string(),
            name: entity.metadata.name.clone(),
            labels: entity.metadata.labels.clone(),
            ips: entity.ips(),
            external_node: entity.spec.external_node.clone().filter(|n| !n.is_empty()),
        }
    }
}

/// The labels of a Namespace no Namespace object describes (a Pod or
/// ExternalEntity lives there): its name label alone.
pub fn name_label(namespace: &str) -> Labels {
    Labels::from_iter([(
        "kubernetes.io/metadata.name".to_string(),
        namespace.to_string(),
    )])
}

#[cfg(test)]
mod tests;
