//! Group membership: what a ClusterGroup or Group selects — Pods, Nodes
//! (`nodeSelector`), ExternalEntities (`externalEntitySelector`), Service
//! backends and IP blocks, following child groups one level deep — and
//! ExternalEntity selection shared with stand-alone peers. Reads the
//! inventory only; a group that does not exist selects nothing.

use std::net::IpAddr;

use crate::model::{GroupSpec, LabelSelector};
use crate::ruleset::Block;

use super::inventory::PodIdx;
use super::Compiler;

/// The members of a group.
#[derive(Debug, Default)]
pub(super) struct Members {
    pub pods: Vec<PodIdx>,
    /// Indices into the inventory's Nodes.
    pub nodes: Vec<usize>,
    /// Indices into the inventory's ExternalEntities.
    pub external: Vec<usize>,
    pub blocks: Vec<Block>,
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
        for block in spec.ip_block.iter().chain(&spec.ip_blocks) {
            members.blocks.push(Block::new(block.cidr, &block.except));
        }
        if depth == 0 {
            for child in &spec.child_groups {
                let child = self.group_members(child, policy_ns, 1);
                members.pods.extend(child.pods);
                members.nodes.extend(child.nodes);
                members.external.extend(child.external);
                members.blocks.extend(child.blocks);
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

    /// Addresses of a group's Pods, Nodes and ExternalEntities.
    pub(super) fn member_ips(&self, members: &Members) -> Vec<IpAddr> {
        let mut ips = self.pod_ips(&members.pods);
        ips.extend(self.node_ips(&members.nodes));
        ips.extend(self.external_ips(&members.external));
        ips
    }

    pub(super) fn node_ips(&self, nodes: &[usize]) -> Vec<IpAddr> {
        nodes
            .iter()
            .flat_map(|&n| self.inv.nodes[n].ips.iter().copied())
            .collect()
    }

    pub(super) fn external_ips(&self, entities: &[usize]) -> Vec<IpAddr> {
        entities
            .iter()
            .flat_map(|&e| self.inv.external_entities[e].ips.iter().copied())
            .collect()
    }

    /// Whether an ExternalEntity's interfaces are the local Node's: it names
    /// this Node as its ExternalNode, so policies applied to it apply here.
    pub(super) fn external_entity_is_local(&self, entity: usize) -> bool {
        self.inv.external_entities[entity].external_node.as_deref()
            == Some(self.inv.nodes[self.inv.local_node].name.as_str())
    }
}
