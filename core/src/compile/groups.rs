//! Group membership: what a ClusterGroup or Group selects — Pods, Nodes
//! (`nodeSelector`), ExternalEntities (`externalEntitySelector`), Service
//! backends and IP blocks, following child groups one level deep — among
//! the local endpoints (an appliedTo) or as selections (a peer), and
//! ExternalEntity selection shared with stand-alone peers. Reads the
//! inventory only; a group that does not exist selects nothing.

use crate::model::{GroupSpec, LabelSelector, NamespacedName};
use crate::ruleset::Block;
use crate::selection::{NamespaceScope, Selection};

use super::inventory::PodIdx;
use super::Compiler;

/// The local members of a group (an appliedTo; its IP blocks do not count).
#[derive(Debug, Default)]
pub(super) struct Members {
    pub pods: Vec<PodIdx>,
    /// Indices into the inventory's Nodes.
    pub nodes: Vec<usize>,
    /// Indices into the inventory's ExternalEntities.
    pub external: Vec<usize>,
}

impl Compiler<'_> {
    /// ExternalEntities an `externalEntitySelector` picks: in the Namespaces
    /// of the `namespaceSelector` beside it, else in the policy's Namespace,
    /// else (cluster-scoped) in every Namespace — as Antrea matches them.
    pub(super) fn select_external_entities(
        &self,
        selector: &LabelSelector,
        namespace_selector: Option<&LabelSelector>,
        policy_ns: Option<&str>,
    ) -> Vec<usize> {
        match (namespace_selector, policy_ns) {
            (Some(ns_sel), _) => {
                let namespaces = self.inv.namespaces_matching(ns_sel);
                self.inv
                    .external_entities_matching(selector, Some(&namespaces))
            }
            (None, Some(ns)) => self.inv.external_entities_matching(selector, Some(&[ns])),
            (None, None) => self.inv.external_entities_matching(selector, None),
        }
    }

    /// Members of a ClusterGroup (cluster-scoped policy) or Group (in
    /// `policy_ns`). Child groups are followed one level deep, as the spec
    /// allows.
    pub(super) fn group_members(&self, name: &str, policy_ns: Option<&str>, depth: u8) -> Members {
        let group = match policy_ns {
            None => self.inv.cluster_groups.get(name).copied(),
            Some(ns) => self.inv.groups.get(&(ns, name)).copied(),
        };
        let Some(group) = group else {
            return Members::default();
        };
        let spec: &GroupSpec = &group.spec;
        let mut members = Members::default();
        if let Some(selector) = &spec.external_entity_selector {
            members.external = self.select_external_entities(
                selector,
                spec.namespace_selector.as_ref(),
                policy_ns,
            );
        } else if spec.pod_selector.is_some() || spec.namespace_selector.is_some() {
            members.pods = self.select_pods(
                spec.pod_selector.as_ref(),
                spec.namespace_selector.as_ref(),
                policy_ns,
            );
        }
        if let Some(selector) = spec.node_selector.as_ref().filter(|_| policy_ns.is_none()) {
            members.nodes = self.inv.nodes_matching(selector);
        }
        if let Some(reference) = &spec.service_reference {
            members.pods.extend(self.inv.service_backends(reference));
        }
        if depth == 0 {
            for child in &spec.child_groups {
                let child = self.group_members(child, policy_ns, 1);
                members.pods.extend(child.pods);
                members.nodes.extend(child.nodes);
                members.external.extend(child.external);
            }
        }
        for list in [&mut members.nodes, &mut members.external] {
            list.sort_unstable();
            list.dedup();
        }
        members.pods.sort_unstable();
        members.pods.dedup();
        members
    }

    /// The selection of an `externalEntitySelector` as a peer: in the
    /// Namespaces of the `namespaceSelector` beside it, else in the
    /// policy's Namespace, else in every Namespace.
    pub(super) fn entities_selection(
        selector: &LabelSelector,
        namespace_selector: Option<&LabelSelector>,
        policy_ns: Option<&str>,
    ) -> Selection {
        let namespaces = match (namespace_selector, policy_ns) {
            (Some(ns_sel), _) => NamespaceScope::Selector(ns_sel.clone()),
            (None, Some(ns)) => NamespaceScope::named(ns),
            (None, None) => NamespaceScope::All,
        };
        Selection::ExternalEntities {
            namespaces,
            selector: selector.clone(),
        }
    }

    /// What a ClusterGroup or Group selects as a peer: the selections of
    /// its Pods, Nodes, ExternalEntities and Service backends, and its IP
    /// blocks, child groups followed one level deep. A group that does not
    /// exist selects nothing.
    pub(super) fn group_selections(
        &self,
        name: &str,
        policy_ns: Option<&str>,
        depth: u8,
    ) -> (Vec<Selection>, Vec<Block>) {
        let group = match policy_ns {
            None => self.inv.cluster_groups.get(name).copied(),
            Some(ns) => self.inv.groups.get(&(ns, name)).copied(),
        };
        let Some(group) = group else {
            return (Vec::new(), Vec::new());
        };
        let spec: &GroupSpec = &group.spec;
        let mut selections = Vec::new();
        let mut blocks = Vec::new();
        if let Some(selector) = &spec.external_entity_selector {
            selections.push(Self::entities_selection(
                selector,
                spec.namespace_selector.as_ref(),
                policy_ns,
            ));
        } else if spec.pod_selector.is_some() || spec.namespace_selector.is_some() {
            selections.extend(Self::pods_selection(
                spec.pod_selector.as_ref(),
                spec.namespace_selector.as_ref(),
                policy_ns,
            ));
        }
        if let Some(selector) = spec.node_selector.as_ref().filter(|_| policy_ns.is_none()) {
            selections.push(Selection::Nodes(selector.clone()));
        }
        if let Some(reference) = &spec.service_reference {
            selections.extend(self.backends_selection(reference));
        }
        for block in spec.ip_block.iter().chain(&spec.ip_blocks) {
            blocks.push(Block::new(block.cidr, &block.except));
        }
        if depth == 0 {
            for child in &spec.child_groups {
                let (child_selections, child_blocks) = self.group_selections(child, policy_ns, 1);
                selections.extend(child_selections);
                blocks.extend(child_blocks);
            }
        }
        selections.sort();
        selections.dedup();
        (selections, blocks)
    }

    /// The backends of a Service as a selection (none for a missing or
    /// selector-less Service).
    fn backends_selection(&self, reference: &NamespacedName) -> Option<Selection> {
        let service = self
            .inv
            .services
            .get(&(reference.namespace.clone(), reference.name.clone()))?;
        Some(Selection::Pods {
            namespaces: NamespaceScope::named(&reference.namespace),
            pods: Some(service.backends_selector()?),
        })
    }

    /// Whether an ExternalEntity's interfaces are the local Node's: it names
    /// this Node as its ExternalNode, so policies applied to it apply here.
    pub(super) fn external_entity_is_local(&self, entity: usize) -> bool {
        self.inv.every_node
            || self.inv.external_entities[entity].external_node.as_deref()
                == Some(self.inv.nodes[self.inv.local_node].name.as_str())
    }
}
