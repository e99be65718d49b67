//! [`Delta`]: one change of the inventory (a Pod, Namespace, Node or
//! ExternalEntity put in place or removed), as [`super::Selections`]
//! applies it. Pure data; it never reads a policy.

use crate::model::Object;

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
