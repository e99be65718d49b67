//! The span of the policies: every Pod and Node [`Selection`] a rule of
//! any policy or group could use on any Node — what the `tollgate
//! controller` publishes as AddressGroups ([`crate::selection::group`]). It runs the
//! rule assembly itself over a view that stands for every Node at once
//! (every Pod shape local, the Node matching every nodeSelector, every
//! ExternalEntity local), so each selection is normalised by the code
//! agents run and has the key they compute; context-dependent peers
//! (`namespaces: {match: Self}`, `sameLabels`) give one selection per
//! Namespace of the Pods the rule applies to. Pure: no I/O, no clock; it
//! never reads a Pod's address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::model::{Object, Snapshot};
use crate::selection::{
    name_label, ExternalEntry, Labels, NodeEntry, PodEntry, Selection, Selections,
};

use super::{assemble, LocalNode, LocalView};

/// What of a Pod decides which rules apply to it: its Namespace, labels
/// and ServiceAccount. Pods of one shape need the same selections.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodShape {
    pub namespace: String,
    pub labels: Labels,
    pub service_account: String,
}

impl PodShape {
    pub fn of(pod: &PodEntry) -> PodShape {
        PodShape {
            namespace: pod.namespace.clone(),
            labels: pod.labels.clone(),
            service_account: pod.service_account.clone(),
        }
    }
}

/// Every Pod selection (`Pods`, `ServiceAccount`) and Node selection
/// (`Nodes`) the policies of `policies` use on some Node, for Pods of
/// `shapes`: what agents in controller mode read from AddressGroups
/// instead of watching every Pod and every Node. `policies` holds the
/// policy side (policies, groups, Tiers, Namespaces, Services,
/// ExternalEntities); its Pods and Nodes are not read. A shape stands for
/// a Pod whether or not it has an address yet, so a selection is
/// published before the Pod that needs it is enforced.
pub fn published_selections<'a>(
    policies: &Snapshot,
    shapes: impl IntoIterator<Item = &'a PodShape>,
) -> BTreeSet<Selection> {
    let mut namespaces: BTreeMap<String, Labels> = BTreeMap::new();
    let mut entities = Vec::new();
    for object in policies.iter() {
        match object {
            Object::Namespace(ns) => {
                namespaces.insert(ns.metadata.name.clone(), ns.effective_labels());
            }
            Object::ExternalEntity(ee) => entities.push(ExternalEntry::of(ee)),
            _ => {}
        }
    }
    for entity in &entities {
        namespaces
            .entry(entity.namespace.clone())
            .or_insert_with(|| name_label(&entity.namespace));
    }
    // An address makes a Pod an endpoint; which one does not matter here.
    let placeholder = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let pods = shapes
        .into_iter()
        .enumerate()
        .map(|(i, shape)| PodEntry {
            namespace: shape.namespace.clone(),
            name: format!("shape-{i}"),
            labels: shape.labels.clone(),
            ips: vec![placeholder],
            service_account: shape.service_account.clone(),
            node_name: None,
            named_ports: Vec::new(),
            host_ports: Vec::new(),
        })
        .collect();
    let view = LocalView {
        pods,
        node: NodeEntry {
            name: String::new(),
            labels: Labels::new(),
            ips: Vec::new(),
            pod_cidrs: Vec::new(),
        },
        entities,
        namespaces: Arc::new(namespaces),
        every_node: true,
    };
    // No member is held: asking for a selection's addresses costs nothing.
    let mut peers = Selections::new(&Snapshot::default(), &LocalNode::default());
    assemble(policies, view, &mut peers);
    peers
        .selections()
        .filter(|s| !matches!(s, Selection::ExternalEntities { .. }))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
