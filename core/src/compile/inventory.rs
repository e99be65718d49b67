//! The inventory as the compiler queries it: Pods, ExternalEntities,
//! Namespaces, Nodes, Services and Groups from a snapshot, indexed so that label selectors
//! resolve without scanning every Pod for every selector.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{
    AntreaGroup, LabelSelector, NamespacedName, Object, PortProtocol, Service, Snapshot,
};

use super::LocalNode;

/// One Pod, reduced to what policy needs.
#[derive(Clone, Debug)]
pub struct PodEntry {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ips: Vec<IpAddr>,
    pub service_account: String,
    pub node_name: Option<String>,
    pub named_ports: Vec<(String, PortProtocol, u16)>,
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

/// One Node: its labels, addresses and Pod address ranges.
#[derive(Clone, Debug)]
pub struct NodeEntry {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub ips: Vec<IpAddr>,
    pub pod_cidrs: Vec<IpNet>,
}

/// One ExternalEntity: matched like a Pod, by labels within a Namespace.
#[derive(Clone, Debug)]
pub struct ExternalEntry {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub ips: Vec<IpAddr>,
    pub external_node: Option<String>,
}

pub type PodIdx = u32;

/// Pods indexed by label and Namespace, Namespaces by name.
pub struct Inventory<'a> {
    pub pods: Vec<PodEntry>,
    pub nodes: Vec<NodeEntry>,
    pub external_entities: Vec<ExternalEntry>,
    /// The local Node's index in `nodes`.
    pub local_node: usize,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// label key → value → Pods carrying it.
    pods_by_label: HashMap<String, HashMap<String, Vec<PodIdx>>>,
    pods_by_namespace: HashMap<String, Vec<PodIdx>>,
    pub services: HashMap<(String, String), &'a Service>,
    pub cluster_groups: HashMap<&'a str, &'a AntreaGroup>,
    pub groups: HashMap<(&'a str, &'a str), &'a AntreaGroup>,
}

impl<'a> Inventory<'a> {
    pub fn build(snapshot: &'a Snapshot, local: &LocalNode) -> Inventory<'a> {
        let mut pods = Vec::new();
        let mut nodes = Vec::new();
        let mut external_entities = Vec::new();
        let mut namespaces = BTreeMap::new();
        let mut services = HashMap::new();
        let mut cluster_groups = HashMap::new();
        let mut groups = HashMap::new();
        for object in snapshot.iter() {
            match object {
                Object::Pod(pod) => {
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
                    pods.push(PodEntry {
                        namespace: pod.namespace().to_string(),
                        name: pod.metadata.name.clone(),
                        labels: pod.metadata.labels.clone(),
                        ips: pod.ips(),
                        service_account: pod.service_account().to_string(),
                        node_name: pod.spec.node_name.clone().filter(|n| !n.is_empty()),
                        named_ports,
                        host_ports,
                    });
                }
                Object::Node(node) => nodes.push(NodeEntry {
                    name: node.metadata.name.clone(),
                    labels: node.metadata.labels.clone(),
                    ips: node.ips(),
                    pod_cidrs: node.pod_cidrs(),
                }),
                Object::ExternalEntity(ee) => external_entities.push(ExternalEntry {
                    namespace: ee.namespace().to_string(),
                    labels: ee.metadata.labels.clone(),
                    ips: ee.ips(),
                    external_node: ee.spec.external_node.clone().filter(|n| !n.is_empty()),
                }),
                Object::Namespace(ns) => {
                    namespaces.insert(ns.metadata.name.clone(), ns.effective_labels());
                }
                Object::Service(svc) => {
                    services.insert(
                        (svc.namespace().to_string(), svc.metadata.name.clone()),
                        svc,
                    );
                }
                Object::ClusterGroup(g) => {
                    cluster_groups.insert(g.metadata.name.as_str(), g);
                }
                Object::Group(g) => {
                    let ns = g.metadata.namespace.as_deref().unwrap_or("default");
                    groups.insert((ns, g.metadata.name.as_str()), g);
                }
                _ => {}
            }
        }
        // Namespaces a Pod or ExternalEntity lives in exist even when no
        // Namespace object says so.
        for namespace in pods
            .iter()
            .map(|p| &p.namespace)
            .chain(external_entities.iter().map(|e| &e.namespace))
        {
            namespaces
                .entry(namespace.clone())
                .or_insert_with(|| name_label(namespace));
        }
        // The local Node: the inventory's object of that name, merged with the
        // configured labels and the addresses found on the host.
        let local_node = match nodes.iter().position(|n| n.name == local.name) {
            Some(i) => i,
            None => {
                nodes.push(NodeEntry {
                    name: local.name.clone(),
                    labels: BTreeMap::new(),
                    ips: Vec::new(),
                    pod_cidrs: Vec::new(),
                });
                nodes.len() - 1
            }
        };
        // Every object of the local Node's name adds its Pod ranges (a
        // policy file's Node and the Docker source's container networks).
        let ranges: Vec<IpNet> = nodes
            .iter()
            .filter(|n| n.name == local.name)
            .flat_map(|n| n.pod_cidrs.iter().copied())
            .collect();
        let node = &mut nodes[local_node];
        for range in ranges {
            if !node.pod_cidrs.contains(&range) {
                node.pod_cidrs.push(range);
            }
        }
        node.labels
            .extend(local.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        // An ExternalEntity of this ExternalNode is one of its interfaces.
        let local_entities = external_entities
            .iter()
            .filter(|e| e.external_node.as_deref() == Some(local.name.as_str()))
            .flat_map(|e| e.ips.iter());
        for ip in local.addresses.iter().chain(local_entities) {
            if !node.ips.contains(ip) {
                node.ips.push(*ip);
            }
        }

        let mut pods_by_label: HashMap<String, HashMap<String, Vec<PodIdx>>> = HashMap::new();
        for (idx, pod) in pods.iter().enumerate() {
            for (k, v) in &pod.labels {
                pods_by_label
                    .entry(k.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_default()
                    .push(idx as PodIdx);
            }
        }
        let mut pods_by_namespace: HashMap<String, Vec<PodIdx>> = HashMap::new();
        for (idx, pod) in pods.iter().enumerate() {
            pods_by_namespace
                .entry(pod.namespace.clone())
                .or_default()
                .push(idx as PodIdx);
        }
        Inventory {
            pods,
            nodes,
            external_entities,
            local_node,
            namespaces,
            pods_by_label,
            pods_by_namespace,
            services,
            cluster_groups,
            groups,
        }
    }

    /// Labels of a Namespace (with `kubernetes.io/metadata.name`), if known.
    pub fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespaces.get(namespace)
    }

    /// Names of the Namespaces a selector picks.
    pub fn namespaces_matching(&self, selector: &LabelSelector) -> Vec<&str> {
        self.namespaces
            .iter()
            .filter(|(_, labels)| selector.matches(labels))
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Pods matching `pod_selector` (all Pods when `None`) within the given
    /// Namespaces (all Namespaces when `None`), in index order.
    pub fn pods_matching(
        &self,
        pod_selector: Option<&LabelSelector>,
        namespaces: Option<&[&str]>,
    ) -> Vec<PodIdx> {
        let candidates: Vec<PodIdx> = match namespaces {
            Some(names) => {
                let mut all: Vec<PodIdx> = names
                    .iter()
                    .filter_map(|n| self.pods_by_namespace.get(*n))
                    .flatten()
                    .copied()
                    .collect();
                all.sort_unstable();
                all
            }
            None => match pod_selector.and_then(|s| self.smallest_posting(s)) {
                Some(posting) => posting.to_vec(),
                None => (0..self.pods.len() as PodIdx).collect(),
            },
        };
        match pod_selector {
            None => candidates,
            Some(selector) => candidates
                .into_iter()
                .filter(|&i| selector.matches(&self.pods[i as usize].labels))
                .collect(),
        }
    }

    /// The shortest list of Pods carrying one of the selector's `matchLabels`
    /// pairs; every match is in it. Empty slice when a pair matches no Pod.
    fn smallest_posting(&self, selector: &LabelSelector) -> Option<&[PodIdx]> {
        let mut best: Option<&[PodIdx]> = None;
        for (k, v) in &selector.match_labels {
            let posting = self
                .pods_by_label
                .get(k)
                .and_then(|values| values.get(v))
                .map_or(&[][..], |p| p.as_slice());
            if best.is_none_or(|b| posting.len() < b.len()) {
                best = Some(posting);
            }
        }
        best
    }

    /// ExternalEntities matching `selector` within the given Namespaces (all
    /// Namespaces when `None`). There are few: a scan is enough.
    pub fn external_entities_matching(
        &self,
        selector: &LabelSelector,
        namespaces: Option<&[&str]>,
    ) -> Vec<usize> {
        (0..self.external_entities.len())
            .filter(|&i| {
                let ee = &self.external_entities[i];
                namespaces.is_none_or(|names| names.contains(&ee.namespace.as_str()))
                    && selector.matches(&ee.labels)
            })
            .collect()
    }

    /// Pods running the given ServiceAccount.
    pub fn pods_with_service_account(&self, sa: &NamespacedName) -> Vec<PodIdx> {
        self.pods_by_namespace
            .get(&sa.namespace)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&i| self.pods[i as usize].service_account == sa.name)
            .collect()
    }

    /// Backend Pods of a Service (by its selector; none for selector-less Services).
    pub fn service_backends(&self, reference: &NamespacedName) -> Vec<PodIdx> {
        let Some(service) = self
            .services
            .get(&(reference.namespace.clone(), reference.name.clone()))
        else {
            return Vec::new();
        };
        let Some(selector) = service.spec.selector.as_ref().filter(|s| !s.is_empty()) else {
            return Vec::new();
        };
        let selector = LabelSelector {
            match_labels: selector.clone(),
            match_expressions: Vec::new(),
        };
        self.pods_matching(Some(&selector), Some(&[reference.namespace.as_str()]))
    }

    /// Nodes (including the local one) whose labels match.
    pub fn nodes_matching(&self, selector: &LabelSelector) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| selector.matches(&self.nodes[i].labels))
            .collect()
    }

    /// Whether a Pod is enforced on this node: scheduled here, or unscheduled
    /// (standalone inventories usually leave `nodeName` out).
    pub fn pod_is_local(&self, idx: PodIdx) -> bool {
        let pod = &self.pods[idx as usize];
        pod.node_name
            .as_deref()
            .is_none_or(|n| n == self.nodes[self.local_node].name)
    }
}

fn name_label(namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(
        "kubernetes.io/metadata.name".to_string(),
        namespace.to_string(),
    )])
}
