//! The span of the policies, two ways:
//!
//! - [`published_selections`]: every Pod and Node [`Selection`] a rule of
//!   any policy or group could use on any Node — what the `tollgate
//!   controller` publishes as AddressGroups ([`crate::selection::group`]).
//!   It runs the rule assembly itself over a view that stands for every
//!   Node at once (every Pod shape local, the Node matching every
//!   nodeSelector, every ExternalEntity local), so each selection is
//!   normalised by the code agents run and has the key they compute;
//!   context-dependent peers (`namespaces: {match: Self}`, `sameLabels`)
//!   give one selection per Namespace of the Pods the rule applies to;
//! - [`applied_namespaces`]: the Namespaces whose endpoints a namespaced
//!   policy can apply to, by which an agent that holds only its own Node's
//!   endpoints leaves out the policies that apply on other Nodes only.
//!
//! Pure: no I/O, no clock; never reads a Pod's address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::model::{AntreaGroup, AppliedTo, Object, Snapshot};
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

/// The Namespaces whose endpoints `object` can apply to, as the rule
/// assembly places it: a Kubernetes NetworkPolicy's own Namespace; an
/// Antrea NetworkPolicy's own and those its appliedTo (the policy's and
/// each rule's) reaches through a ServiceAccount or, in a Group (found by
/// `group`, Namespace and name) or its child Groups, a Service. `None`:
/// any Namespace — every other kind, and an appliedTo that selects
/// Namespaces (a Group's `namespaceSelector`, or a field an Antrea
/// NetworkPolicy may not set, which validation then refuses). A Group not
/// found selects nothing, as in the assembly; its arrival can widen the
/// answer.
///
/// A policy none of whose Namespaces holds a local endpoint places no rule
/// on the local Node: leaving it out changes no decision made there, nor
/// the rule that makes it (a test checks it over every path above).
pub fn applied_namespaces<'a>(
    object: &'a Object,
    group: impl Fn(&str, &str) -> Option<&'a AntreaGroup>,
) -> Option<BTreeSet<&'a str>> {
    let (policy, metadata) = match object {
        Object::AntreaNetworkPolicy(p) => (Some(p), &p.metadata),
        Object::K8sNetworkPolicy(p) => (None, &p.metadata),
        _ => return None,
    };
    let own = metadata.namespace.as_deref().unwrap_or("default");
    let mut namespaces = BTreeSet::from([own]);
    let Some(policy) = policy else {
        return Some(namespaces);
    };
    let rules = policy.spec.ingress.iter().chain(&policy.spec.egress);
    let entries = policy
        .spec
        .applied_to
        .iter()
        .chain(rules.flat_map(|r| &r.applied_to));
    for entry in entries {
        reach(entry, own, &group, &mut namespaces)?;
    }
    Some(namespaces)
}

/// [`applied_namespaces`] of one appliedTo entry of a policy in `own`;
/// `None` for any Namespace.
fn reach<'a>(
    entry: &'a AppliedTo,
    own: &str,
    group: &impl Fn(&str, &str) -> Option<&'a AntreaGroup>,
    namespaces: &mut BTreeSet<&'a str>,
) -> Option<()> {
    if entry.namespace_selector.is_some()
        || entry.node_selector.is_some()
        || entry.service.is_some()
    {
        return None;
    }
    if let Some(account) = entry.service_account.as_deref() {
        if !account.namespace.is_empty() {
            namespaces.insert(&account.namespace);
        }
    }
    let Some(name) = entry.group.as_deref() else {
        return Some(());
    };
    let mut groups: Vec<&AntreaGroup> = group(own, name).into_iter().collect();
    if let Some(parent) = groups.first() {
        // One level of nesting, as the assembly reads it.
        groups.extend(
            parent
                .spec
                .child_groups
                .iter()
                .filter_map(|c| group(own, c)),
        );
    }
    for found in groups {
        if found.spec.namespace_selector.is_some() {
            return None;
        }
        if let Some(service) = &found.spec.service_reference {
            if !service.namespace.is_empty() {
                namespaces.insert(&service.namespace);
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests;
