//! Peer resolution: selectors (Pods, ExternalEntities), groups (see
//! `groups`), ServiceAccounts, `namespaces` (`Self`, `sameLabels`), nodeSelectors,
//! `toServices` and FQDN selectors turned into the selections, blocks and
//! selector ids a rule matches; of a peer setting several, only the first of
//! ipBlock > group > fqdn > serviceAccount > nodeSelector > selectors counts.
//! A peer is normalised to [`Selection`]s here and their addresses asked of
//! the [`PeerSets`](super::PeerSets), which shares one set per selection
//! between rules. Reads the inventory only for what the normal form needs
//! (Namespace labels, Services, group definitions).

use std::sync::Arc;

use crate::fqdn::FqdnPattern;
use crate::model::{LabelSelector, Peer};
use crate::ruleset::{Block, PeerMatch};
use crate::selection::{AddressSet, NamespaceScope, Selection};

use super::inventory::PodIdx;
use super::Compiler;

impl Compiler<'_> {
    /// Local Pods selected by a podSelector / namespaceSelector pair (an
    /// appliedTo). In a namespaced policy a lone podSelector selects in
    /// the policy's Namespace.
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

    /// The selection of the same podSelector / namespaceSelector pair as a
    /// peer; `None` when it selects nothing.
    pub(super) fn pods_selection(
        pod_selector: Option<&LabelSelector>,
        namespace_selector: Option<&LabelSelector>,
        policy_ns: Option<&str>,
    ) -> Option<Selection> {
        let namespaces = match (namespace_selector, policy_ns) {
            (Some(ns_sel), _) => NamespaceScope::Selector(ns_sel.clone()),
            (None, Some(ns)) => NamespaceScope::named(ns),
            (None, None) if pod_selector.is_some() => NamespaceScope::All,
            (None, None) => return None,
        };
        Some(Selection::Pods {
            namespaces,
            pods: pod_selector.cloned(),
        })
    }

    /// The addresses of `selection`, shared by every rule that uses it;
    /// recorded in `peers` beside its set.
    pub(super) fn add_selection(&mut self, peers: &mut PeerMatch, selection: Selection) {
        let set: Arc<AddressSet> = self.peers.addresses(&selection);
        peers.addresses.push(set);
        peers.selections.push(selection);
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
            if let Some(group) = &peer.group {
                let (selections, blocks) = self.group_selections(group, policy_ns, 0);
                result.blocks.extend(blocks);
                for selection in selections {
                    self.add_selection(&mut result, selection);
                }
                continue;
            }
            // A peer that selects nothing adds no address.
            if let Some(selection) = self.peer_selection(peer, policy_ns, context_ns) {
                self.add_selection(&mut result, selection);
            }
        }
        result
    }

    /// The selection of a selector peer; `None` when it selects nothing.
    fn peer_selection(
        &self,
        peer: &Peer,
        policy_ns: Option<&str>,
        context_ns: Option<&str>,
    ) -> Option<Selection> {
        if let Some(sa) = &peer.service_account {
            return Some(Selection::ServiceAccount {
                namespace: sa.namespace.clone(),
                name: sa.name.clone(),
            });
        }
        if let Some(selector) = &peer.node_selector {
            return Some(Selection::Nodes(LabelSelector::clone(selector)));
        }
        if let Some(namespaces) = &peer.namespaces {
            // Self/sameLabels for a Node: nothing.
            let context = context_ns?;
            let scope = if namespaces.match_.is_some() {
                NamespaceScope::named(context)
            } else {
                let own = self.inv.namespace_labels(context)?;
                let keys = &namespaces.same_labels;
                if !keys.iter().all(|k| own.contains_key(k)) {
                    return None;
                }
                NamespaceScope::Selector(LabelSelector {
                    match_labels: keys.iter().map(|k| (k.clone(), own[k].clone())).collect(),
                    match_expressions: Vec::new(),
                })
            };
            return Some(Selection::Pods {
                namespaces: scope,
                pods: peer.pod_selector.clone(),
            });
        }
        if let Some(selector) = &peer.external_entity_selector {
            return Some(Self::entities_selection(
                selector,
                peer.namespace_selector.as_ref(),
                policy_ns,
            ));
        }
        Self::pods_selection(
            peer.pod_selector.as_ref(),
            peer.namespace_selector.as_ref(),
            policy_ns,
        )
    }
}
