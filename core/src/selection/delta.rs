//! [`Delta`]: one change of the inventory (a Pod, Namespace, Node or
//! ExternalEntity put in place or removed), as [`super::Selections`]
//! applies it. Pure data; it never reads a policy.

use std::collections::BTreeMap;

use crate::model::{Object, Snapshot};

use super::{ExternalEntry, Labels, NodeEntry, PodEntry};

/// One change of the inventory. `None` deletes.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    Pod {
        namespace: String,
        name: String,
        pod: Option<PodEntry>,
    },
    /// A Namespace object: its labels (with `kubernetes.io/metadata.name`).
    Namespace {
        name: String,
        labels: Option<Labels>,
    },
    Node {
        name: String,
        node: Option<NodeEntry>,
    },
    Entity {
        namespace: String,
        name: String,
        entity: Option<ExternalEntry>,
    },
}

impl Delta {
    /// The delta that puts an inventory object in place; `None` for a
    /// kind that is not inventory.
    pub fn apply(object: &Object) -> Option<Delta> {
        Some(match object {
            Object::Pod(pod) => Delta::Pod {
                namespace: pod.namespace().to_string(),
                name: pod.metadata.name.clone(),
                pod: Some(PodEntry::of(pod)),
            },
            Object::Namespace(ns) => Delta::Namespace {
                name: ns.metadata.name.clone(),
                labels: Some(ns.effective_labels()),
            },
            Object::Node(node) => Delta::Node {
                name: node.metadata.name.clone(),
                node: Some(NodeEntry::of(node)),
            },
            Object::ExternalEntity(ee) => Delta::Entity {
                namespace: ee.namespace().to_string(),
                name: ee.metadata.name.clone(),
                entity: Some(ExternalEntry::of(ee)),
            },
            _ => return None,
        })
    }

    /// The delta that removes an inventory object.
    pub fn delete(object: &Object) -> Option<Delta> {
        Some(match Delta::apply(object)? {
            Delta::Pod {
                namespace, name, ..
            } => Delta::Pod {
                namespace,
                name,
                pod: None,
            },
            Delta::Namespace { name, .. } => Delta::Namespace { name, labels: None },
            Delta::Node { name, .. } => Delta::Node { name, node: None },
            Delta::Entity {
                namespace, name, ..
            } => Delta::Entity {
                namespace,
                name,
                entity: None,
            },
        })
    }
}

/// The deltas that put every inventory member of `snapshot` in place
/// (Pods, Nodes, ExternalEntities; not Namespaces). Several sources may
/// describe one Node (a policy file's Node, the Docker source's container
/// networks): it is put once, with the first's labels and addresses and
/// every one's Pod ranges.
pub fn members(snapshot: &Snapshot) -> Vec<Delta> {
    let mut out = Vec::new();
    let mut nodes: BTreeMap<String, NodeEntry> = BTreeMap::new();
    for object in snapshot.iter() {
        match object {
            Object::Namespace(_) => {}
            Object::Node(node) => {
                let entry = NodeEntry::of(node);
                match nodes.get_mut(&entry.name) {
                    Some(first) => {
                        for range in entry.pod_cidrs {
                            if !first.pod_cidrs.contains(&range) {
                                first.pod_cidrs.push(range);
                            }
                        }
                    }
                    None => {
                        nodes.insert(entry.name.clone(), entry);
                    }
                }
            }
            _ => out.extend(Delta::apply(object)),
        }
    }
    out.extend(nodes.into_iter().map(|(name, node)| Delta::Node {
        name,
        node: Some(node),
    }));
    out
}
