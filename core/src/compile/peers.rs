//! Peer resolution: selectors (Pods, ExternalEntities), groups (see
//! `groups`), ServiceAccounts, `namespaces` (`Self`, `sameLabels`), nodeSelectors,
//! `toServices` and FQDN selectors turned into the addresses, blocks and
//! selector ids a rule matches; of a peer setting several, only the first of
//! ipBlock > group > fqdn > serviceAccount > nodeSelector > selectors counts. Address sets are computed once per distinct
//! peer and shared between rules. Reads the inventory only.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use crate::fqdn::FqdnPattern;
use crate::model::{LabelSelector, Peer};
use crate::ruleset::{Block, PeerMatch};

use super::inventory::PodIdx;
use super::Compiler;

impl Compiler<'_> {
    /// Pods selected by a podSelector / namespaceSelector pair. In a
    /// namespaced policy a lone podSelector selects in the policy's Namespace.
    pub(super) fn select_pods(
        &self,
        pod_selector: Option<&LabelSelector>,
        namespace_selector: Option<&LabelSelector>,
        policy_ns: Option<&str>,
    ) -> Vec<PodIdx> {
        match (namespace_selector, policy_ns) {
            (Some(ns_sel), _) => {
                let namespaces = self.inv.namespaces_matching(ns_sel);
                self.inv.pods_matching(pod_selector, Some(&namespaces))
            }
            (None, Some(ns)) => self.inv.pods_matching(pod_selector, Some(&[ns])),
            (None, None) if pod_selector.is_some() => self.inv.pods_matching(pod_selector, None),
            (None, None) => Vec::new(),
        }
    }

    /// A shared address set for a cache key, computed once.
    pub(super) fn address_set(
        &mut self,
        key: String,
        make: impl FnOnce(&Self) -> Vec<IpAddr>,
    ) -> Arc<HashSet<IpAddr>> {
        if let Some(set) = self.address_sets.get(&key) {
            return set.clone();
        }
        let set = Arc::new(make(self).into_iter().collect::<HashSet<IpAddr>>());
        self.address_sets.insert(key, set.clone());
        set
    }

    pub(super) fn pod_ips(&self, pods: &[PodIdx]) -> Vec<IpAddr> {
        pods.iter()
            .flat_map(|&i| self.inv.pods[i as usize].ips.iter().copied())
            .collect()
    }

    /// Resolves `from`/`to` peers (and `toServices`) to a [`PeerMatch`].
    /// `context_ns` is the applied-to endpoint's Namespace, for
    /// `namespaces: {match: Self}` and `sameLabels`.
    pub(super) fn resolve_peers(
        &mut self,
        peers: &[Peer],
        to_services: &[crate::model::PeerService],
        policy_ns: Option<&str>,
        context_ns: Option<&str>,
    ) -> PeerMatch {
        let mut result = PeerMatch {
            any: peers.is_empty() && to_services.is_empty(),
            ..Default::default()
        };
        for service in to_services {
            // A Multicluster Service: none is in the inventory (Antrea's
            // controller skips it too without stretched policies).
            if service.cluster_set() {
                continue;
            }
            // A namespaced policy's reference without a namespace is to its
            // own Namespace, as Antrea's controller reads it.
            let namespace = match (service.namespace.as_str(), policy_ns) {
                ("", Some(own)) => own,
                (namespace, _) => namespace,
            };
            if let Some(svc) = self
                .inv
                .services
                .get(&(namespace.to_string(), service.name.clone()))
            {
                for ip in svc.cluster_ips() {
                    for port in &svc.spec.ports {
                        if let Ok(p) = u16::try_from(port.port) {
                            result.services.push((ip, port.protocol, p));
                        }
                    }
                }
            }
        }
        // A peer setting several fields means only the first of ipBlock >
        // group > fqdn > serviceAccount > nodeSelector > selectors, as
        // Antrea's controller reads it (validation warns about the rest).
        for peer in peers {
            if let Some(block) = &peer.ip_block {
                result.blocks.push(Block::new(block.cidr, &block.except));
                continue;
            }
            if let Some(fqdn) = peer.fqdn.as_ref().filter(|_| peer.group.is_none()) {
                let pattern = FqdnPattern::new(fqdn);
                let next = self.fqdn_patterns.len() as u32;
                let id = *self.fqdn_patterns.entry(pattern).or_insert(next);
                result.fqdns.push(id);
                continue;
            }
            let key = format!(
                "{}|{}|{}",
                serde_json::to_string(peer).unwrap_or_default(),
                policy_ns.unwrap_or(""),
                if peer.namespaces.is_some() {
                    context_ns.unwrap_or("")
                } else {
                    ""
                }
            );
            if let Some(group) = &peer.group {
                let mut members = self.group_members(group, policy_ns, 0);
                result.blocks.extend(std::mem::take(&mut members.blocks));
                let set = self.address_set(key, |c| c.member_ips(&members));
                result.addresses.push(set);
                continue;
            }
            let set = self.address_set(key, |c| c.peer_addresses(peer, policy_ns, context_ns));
            result.addresses.push(set);
        }
        result
    }

    /// Addresses of the Pods or Nodes a selector peer picks.
    fn peer_addresses(
        &self,
        peer: &Peer,
        policy_ns: Option<&str>,
        context_ns: Option<&str>,
    ) -> Vec<IpAddr> {
        if let Some(sa) = &peer.service_account {
            return self.pod_ips(&self.inv.pods_with_service_account(sa));
        }
        if let Some(selector) = &peer.node_selector {
            return self.node_ips(&self.inv.nodes_matching(selector));
        }
        if let Some(namespaces) = &peer.namespaces {
            let Some(context) = context_ns else {
                return Vec::new(); // Self/sameLabels for a Node: nothing
            };
            let selected: Vec<&str> = if namespaces.match_.is_some() {
                vec![context]
            } else {
                let Some(own) = self.inv.namespace_labels(context) else {
                    return Vec::new();
                };
                let keys = &namespaces.same_labels;
                if !keys.iter().all(|k| own.contains_key(k)) {
                    return Vec::new();
                }
                let wanted = LabelSelector {
                    match_labels: keys.iter().map(|k| (k.clone(), own[k].clone())).collect(),
                    match_expressions: Vec::new(),
                };
                self.inv.namespaces_matching(&wanted)
            };
            let pods = self
                .inv
                .pods_matching(peer.pod_selector.as_ref(), Some(&selected));
            return self.pod_ips(&pods);
        }
        if let Some(selector) = &peer.external_entity_selector {
            return self.external_ips(&self.select_external_entities(
                selector,
                peer.namespace_selector.as_ref(),
                policy_ns,
            ));
        }
        let pods = self.select_pods(
            peer.pod_selector.as_ref(),
            peer.namespace_selector.as_ref(),
            policy_ns,
        );
        self.pod_ips(&pods)
    }
}
