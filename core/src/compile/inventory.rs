//! The inventory as the rule assembly queries it: the *local* endpoints
//! (Pods of this Node, the Node itself, the ExternalEntities of this
//! ExternalNode), every Namespace, and the Services and Groups of a
//! snapshot. Peers are never resolved here but by selection
//! ([`crate::selection`]), so nothing here grows with the cluster's Pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::{AntreaGroup, LabelSelector, NamespacedName, Object, Service, Snapshot};
use crate::selection::{name_label, ExternalEntry, Labels, NodeEntry, PodEntry, Selections};

/// The local endpoints and the Namespaces, as the rule assembly reads them.
#[derive(Clone, Debug)]
pub struct LocalView {
    /// Pods enforced on this Node (scheduled here, or unscheduled).
    pub pods: Vec<PodEntry>,
    /// This Node, with the configured labels and the host's addresses.
    pub node: NodeEntry,
    /// The ExternalEntities of this ExternalNode.
    pub entities: Vec<ExternalEntry>,
    /// Every Namespace with its labels (with `kubernetes.io/metadata.name`),
    /// shared with the selections that keep them.
    pub namespaces: Arc<BTreeMap<String, Labels>>,
    /// The view stands for every Node at once (the controller's span,
    /// `super::span`): `node` matches every nodeSelector and every
    /// ExternalEntity of `entities` is local.
    pub every_node: bool,
}

impl LocalView {
    /// The local part of a whole inventory.
    pub fn of(selections: &Selections) -> LocalView {
        let local = &selections.local().name;
        let node = selections
            .effective_node(local)
            .unwrap_or_else(|| NodeEntry {
                name: local.clone(),
                labels: Labels::new(),
                ips: Vec::new(),
                pod_cidrs: Vec::new(),
            });
        LocalView {
            pods: selections.local_pods().cloned().collect(),
            node,
            entities: selections
                .entities()
                .filter(|e| e.external_node.as_deref() == Some(local.as_str()))
                .cloned()
                .collect(),
            namespaces: selections.namespace_view(),
            every_node: false,
        }
    }
}

pub type PodIdx = u32;

/// Pods indexed by label and Namespace, Namespaces by name.
pub struct Inventory<'a> {
    pub pods: Vec<PodEntry>,
    pub nodes: Vec<NodeEntry>,
    pub external_entities: Vec<ExternalEntry>,
    /// The local Node's index in `nodes`.
    pub local_node: usize,
    /// See [`LocalView::every_node`].
    pub every_node: bool,
    namespaces: Arc<BTreeMap<String, Labels>>,
    /// The Namespaces of local endpoints that `namespaces` lacks, with
    /// their name label only.
    unlisted: BTreeMap<String, Labels>,
    /// label key → value → Pods carrying it.
    pods_by_label: HashMap<String, HashMap<String, Vec<PodIdx>>>,
    pods_by_namespace: HashMap<String, Vec<PodIdx>>,
    pub services: HashMap<(String, String), &'a Service>,
    pub cluster_groups: HashMap<&'a str, &'a AntreaGroup>,
    pub groups: HashMap<(&'a str, &'a str), &'a AntreaGroup>,
}

impl<'a> Inventory<'a> {
    pub fn build(snapshot: &'a Snapshot, view: LocalView) -> Inventory<'a> {
        let mut services = HashMap::new();
        let mut cluster_groups = HashMap::new();
        let mut groups = HashMap::new();
        for object in snapshot.iter() {
            match object {
                Object::Service(svc) => {
                    services.insert(
                        (svc.namespace().to_string(), svc.metadata.name.clone()),
                        svc,
                    );
                }
                Object::ClusterGroup(g) => {
                    cluster_groups.insert(g.metadata.name.as_str(), &**g);
                }
                Object::Group(g) => {
                    let ns = g.metadata.namespace.as_deref().unwrap_or("default");
                    groups.insert((ns, g.metadata.name.as_str()), &**g);
                }
                _ => {}
            }
        }
        let LocalView {
            pods,
            node,
            entities: external_entities,
            namespaces,
            every_node,
        } = view;
        let mut unlisted = BTreeMap::new();
        for namespace in pods
            .iter()
            .map(|p| &p.namespace)
            .chain(external_entities.iter().map(|e| &e.namespace))
        {
            if !namespaces.contains_key(namespace) {
                unlisted
                    .entry(namespace.clone())
                    .or_insert_with(|| name_label(namespace));
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
            nodes: vec![node],
            external_entities,
            local_node: 0,
            every_node,
            namespaces,
            unlisted,
            pods_by_label,
            pods_by_namespace,
            services,
            cluster_groups,
            groups,
        }
    }

    /// Labels of a Namespace (with `kubernetes.io/metadata.name`), if known.
    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespaces
            .get(namespace)
            .or_else(|| self.unlisted.get(namespace))
    }

    /// Names of the Namespaces a selector picks.
    pub fn namespaces_matching(&self, selector: &LabelSelector) -> Vec<&str> {
        self.namespaces
            .iter()
            .chain(&self.unlisted)
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
        let Some(selector) = service.backends_selector() else {
            return Vec::new();
        };
        self.pods_matching(Some(&selector), Some(&[reference.namespace.as_str()]))
    }

    /// Nodes (including the local one) whose labels match; every one
    /// when the view stands for every Node.
    pub fn nodes_matching(&self, selector: &LabelSelector) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.every_node || selector.matches(&self.nodes[i].labels))
            .collect()
    }
}
