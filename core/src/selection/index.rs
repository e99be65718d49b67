//! [`Selections`]: the inventory (Pods, Namespaces, Nodes,
//! ExternalEntities) indexed by label and Namespace, and the address set
//! of each selection in use, kept up to date by [`Delta`]s. A delta is
//! matched against the selections in use (those of its Namespace first),
//! never the other way round; a delta that changes nothing a selection or
//! a name reads changes nothing. Address sets ([`AddressSet`]) are
//! handed out as `Arc`s and replaced, never changed in place, so a
//! ruleset holding one keeps what it was compiled with.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::compile::LocalNode;
use crate::model::{Object, Snapshot};

use super::membership::Membership;
use super::{
    members, name_label, AddressSet, Delta, ExternalEntry, Labels, MemberKind, NamedPort,
    NamedPorts, Names, NamespaceScope, NodeEntry, PodEntry, Selection,
};

/// A Namespace: its object's labels, if any, and how many Pods and
/// ExternalEntities live in it (a Namespace with members exists even
/// without an object, labelled with its name alone).
#[derive(Debug, Default)]
struct NamespaceState {
    object: Option<Labels>,
    implicit: Labels,
    members: usize,
}

impl NamespaceState {
    fn labels(&self) -> &Labels {
        self.object.as_ref().unwrap_or(&self.implicit)
    }
}

mod compare;
mod named;
mod pods;
mod published;

use published::Published;

type PodId = u32;

/// A Pod's Namespace and name (or, for a published group's members, the
/// group's key after `~` and the slice: a name no Namespace has).
type PodKey = (String, String);

/// The inventory and the address sets of the selections in use.
#[derive(Debug, Default)]
pub struct Selections {
    local: LocalNode,
    pods: Vec<Option<PodEntry>>,
    free: Vec<PodId>,
    pod_ids: HashMap<(String, String), PodId>,
    pods_by_namespace: HashMap<String, BTreeSet<PodId>>,
    /// Pods enforced on the local Node, by `(namespace, name)`.
    local_pods: BTreeMap<(String, String), PodId>,
    /// label key → value → Pods carrying it.
    pods_by_label: HashMap<String, HashMap<String, HashSet<PodId>>>,
    namespaces: HashMap<String, NamespaceState>,
    /// The labels of `namespaces`, by name, kept in step with it and
    /// shared with each rule assembly ([`Selections::namespace_view`]):
    /// an assembly copied the labels of every Namespace (1,500 of them at
    /// the local agent of the simulation).
    namespace_view: Arc<BTreeMap<String, Labels>>,
    /// Node objects (the local Node's merge is made when read).
    nodes: HashMap<String, NodeEntry>,
    entities: BTreeMap<(String, String), ExternalEntry>,
    memberships: Vec<Option<Membership>>,
    /// The ids of `memberships` left free by a stopped selection; the
    /// lowest is taken first. A scan for a free slot at each start made
    /// a pass that starts n selections cost n²/2 slot reads: 40 % of the
    /// controller's span at 150,000 Pods.
    free_ids: BTreeSet<u32>,
    ids: HashMap<Selection, u32>,
    /// Pod selections by the one Namespace they look in.
    pod_scoped: HashMap<String, BTreeSet<u32>>,
    /// Pod selections that look in more than one Namespace.
    pod_unscoped: BTreeSet<u32>,
    node_selections: BTreeSet<u32>,
    entity_selections: BTreeSet<u32>,
    /// Per address, the named ports of each Pod (by Namespace and name)
    /// that has it.
    named: HashMap<IpAddr, BTreeMap<PodKey, Arc<[NamedPort]>>>,
    named_ports: NamedPorts,
    names: Names,
    /// In controller mode, the published groups Pod selections read their
    /// members from (`None`: from the Pods, watch mode).
    published: Option<Published>,
    /// Bumped whenever `named_ports` or `names` changes.
    directory_changes: u64,
    /// Bumped whenever a member or a Namespace's labels change.
    revision: u64,
}

impl Selections {
    /// The inventory of `snapshot`, seen from `local`.
    pub fn new(snapshot: &Snapshot, local: &LocalNode) -> Selections {
        Selections::with(snapshot, local, None)
    }

    fn with(snapshot: &Snapshot, local: &LocalNode, published: Option<Published>) -> Selections {
        let mut selections = Selections {
            local: local.clone(),
            published,
            ..Selections::default()
        };
        for object in snapshot.iter() {
            if let Object::Namespace(_) = object {
                selections.apply(Delta::apply(object).expect("a Namespace is inventory"));
            }
        }
        for delta in members(snapshot) {
            selections.apply(delta);
        }
        selections.refresh_local_node(None);
        selections
    }

    /// The Node the sets are seen from.
    pub fn local(&self) -> &LocalNode {
        &self.local
    }

    /// Labels of Namespace `name` (with `kubernetes.io/metadata.name`), if known.
    pub fn namespace_labels(&self, name: &str) -> Option<&Labels> {
        self.namespaces.get(name).map(NamespaceState::labels)
    }

    /// Every known Namespace's labels, by name (shared: the next change
    /// of a Namespace copies the map only while a reader still holds it).
    pub fn namespace_view(&self) -> Arc<BTreeMap<String, Labels>> {
        Arc::clone(&self.namespace_view)
    }

    /// Brings [`Selections::namespace_view`] to what `namespaces` holds for
    /// `name`.
    fn view_namespace(&mut self, name: &str) {
        let now = self.namespaces.get(name).map(NamespaceState::labels);
        if self.namespace_view.get(name) == now {
            return;
        }
        let view = Arc::make_mut(&mut self.namespace_view);
        match now {
            Some(labels) => {
                view.insert(name.to_string(), labels.clone());
            }
            None => {
                view.remove(name);
            }
        }
    }

    /// The Pods enforced on the local Node (or unscheduled), by
    /// Namespace and name.
    pub fn local_pods(&self) -> impl Iterator<Item = &PodEntry> {
        self.local_pods
            .values()
            .filter_map(|&id| self.pods[id as usize].as_ref())
    }

    /// Whether a Pod of that name is enforced on the local Node.
    pub fn is_local_pod(&self, namespace: &str, name: &str) -> bool {
        self.local_pods
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Every ExternalEntity.
    pub fn entities(&self) -> impl Iterator<Item = &ExternalEntry> {
        self.entities.values()
    }

    /// Every Node, the local one merged with what `LocalNode` adds.
    pub fn nodes(&self) -> Vec<NodeEntry> {
        let mut names: BTreeSet<&str> = self.nodes.keys().map(String::as_str).collect();
        names.insert(&self.local.name);
        names
            .into_iter()
            .filter_map(|n| self.effective_node(n))
            .collect()
    }

    pub fn named_ports(&self) -> &NamedPorts {
        &self.named_ports
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Changes whenever [`Selections::named_ports`] or
    /// [`Selections::names`] does.
    pub fn directory_version(&self) -> u64 {
        self.directory_changes
    }

    /// Changes whenever a member or a Namespace's labels do: a delta that
    /// leaves it alone changed nothing.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Node `name` as selections see it: the local Node has the
    /// configured labels and the host's addresses and those of the
    /// ExternalEntities of this ExternalNode added.
    pub fn effective_node(&self, name: &str) -> Option<NodeEntry> {
        let object = self.nodes.get(name);
        if name != self.local.name {
            return object.cloned();
        }
        let mut node = object.cloned().unwrap_or_else(|| NodeEntry {
            name: name.to_string(),
            labels: Labels::new(),
            ips: Vec::new(),
            pod_cidrs: Vec::new(),
        });
        node.labels.extend(
            self.local
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let local_entities = self
            .entities
            .values()
            .filter(|e| e.external_node.as_deref() == Some(name))
            .flat_map(|e| e.ips.iter());
        for ip in self.local.addresses.iter().chain(local_entities) {
            if !node.ips.contains(ip) {
                node.ips.push(*ip);
            }
        }
        Some(node)
    }

    /// Applies one change to the inventory and the sets in use.
    pub fn apply(&mut self, delta: Delta) {
        match delta {
            Delta::Pod {
                namespace,
                name,
                pod,
            } => self.set_pod(namespace, name, pod),
            Delta::Namespace { name, labels } => self.set_namespace(name, labels),
            Delta::Node { name, node } => {
                let before = self.counted_node(&name);
                match node {
                    Some(node) => self.nodes.insert(name.clone(), node),
                    None => self.nodes.remove(&name),
                };
                self.node_moved(&name, before);
            }
            Delta::Entity {
                namespace,
                name,
                entity,
            } => self.set_entity(namespace, name, entity),
        }
    }

    /// The local Node changed (a reload reads its labels and addresses
    /// again).
    pub fn set_local(&mut self, local: &LocalNode) {
        if *local == self.local {
            return;
        }
        let old_name = self.local.name.clone();
        let before_old = self.counted_node(&old_name);
        let before_new = self.counted_node(&local.name);
        self.local = local.clone();
        self.local_pods = self
            .pod_ids
            .iter()
            .filter(|(_, &id)| {
                self.pods[id as usize]
                    .as_ref()
                    .is_some_and(|p| p.is_on(&local.name))
            })
            .map(|(key, &id)| (key.clone(), id))
            .collect();
        self.node_moved(&old_name, before_old);
        if local.name != old_name {
            self.node_moved(&local.name, before_new);
        }
    }

    fn refresh_local_node(&mut self, before: Option<NodeEntry>) {
        let name = self.local.name.clone();
        self.node_moved(&name, before);
    }

    /// The address set of `selection`, computed on first use; marks it
    /// used (see [`Selections::begin`]).
    pub fn addresses(&mut self, selection: &Selection) -> Arc<AddressSet> {
        let id = match self.ids.get(selection) {
            Some(&id) => id,
            None => self.start(selection.clone()),
        };
        let membership = self.memberships[id as usize]
            .as_mut()
            .expect("an id names a membership");
        membership.used = true;
        membership.settle();
        Arc::clone(&membership.set)
    }

    /// The slot `selection` is kept in, and how many slots there are.
    #[cfg(test)]
    pub(crate) fn slot(&self, selection: &Selection) -> (Option<u32>, usize) {
        (self.ids.get(selection).copied(), self.memberships.len())
    }

    /// Every selection in use.
    pub fn selections(&self) -> impl Iterator<Item = &Selection> {
        self.memberships.iter().flatten().map(|m| &m.selection)
    }

    /// Starts a pass of [`Selections::addresses`] calls: selections not
    /// asked for again before [`Selections::end`] are dropped.
    pub fn begin(&mut self) {
        for membership in self.memberships.iter_mut().flatten() {
            membership.used = false;
        }
    }

    /// Drops the selections not used since [`Selections::begin`].
    pub fn end(&mut self) {
        let unused: Vec<Selection> = self
            .memberships
            .iter()
            .flatten()
            .filter(|m| !m.used)
            .map(|m| m.selection.clone())
            .collect();
        for selection in unused {
            self.stop(&selection);
        }
    }

    /// Stops keeping `selection`.
    pub fn stop(&mut self, selection: &Selection) {
        let Some(id) = self.ids.remove(selection) else {
            return;
        };
        self.memberships[id as usize] = None;
        self.free_ids.insert(id);
        if let Some(published) = &mut self.published {
            published.stop(id);
        }
        self.pod_unscoped.remove(&id);
        self.node_selections.remove(&id);
        self.entity_selections.remove(&id);
        if let Some(ns) = single_namespace(selection) {
            if let Some(ids) = self.pod_scoped.get_mut(ns) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.pod_scoped.remove(ns);
                }
            }
        }
    }

    /// The selections whose address sets changed since last asked, with
    /// their new sets.
    pub fn take_changed(&mut self) -> Vec<(Selection, Arc<AddressSet>)> {
        self.memberships
            .iter_mut()
            .flatten()
            .filter_map(|m| {
                m.settle()
                    .then(|| (m.selection.clone(), Arc::clone(&m.set)))
            })
            .collect()
    }

    /// Whether any set has changes not yet taken.
    pub fn has_changes(&self) -> bool {
        self.memberships
            .iter()
            .flatten()
            .any(Membership::has_pending)
    }

    fn start(&mut self, selection: Selection) -> u32 {
        let id = match self.free_ids.pop_first() {
            Some(free) => free,
            None => {
                self.memberships.push(None);
                (self.memberships.len() - 1) as u32
            }
        };
        let mut membership = Membership::new(selection.clone());
        match selection.member_kind() {
            MemberKind::Pod if self.published.is_some() => {
                let published = self.published.as_mut().expect("controller mode");
                published.start(id, &selection, &mut membership);
            }
            MemberKind::Pod => {
                for pod in self.pod_candidates(&selection) {
                    let Some(pod) = self.pods[pod as usize].as_ref() else {
                        continue;
                    };
                    if selection.matches_pod(pod, self.namespace_labels(&pod.namespace)) {
                        membership.add(&pod.ips);
                    }
                }
                match single_namespace(&selection) {
                    Some(ns) => {
                        self.pod_scoped
                            .entry(ns.to_string())
                            .or_default()
                            .insert(id);
                    }
                    None => {
                        self.pod_unscoped.insert(id);
                    }
                }
            }
            MemberKind::Node => {
                // In controller mode, the group and the local Node.
                let nodes = match self.published.as_mut() {
                    Some(published) => {
                        published.start(id, &selection, &mut membership);
                        self.effective_node(&self.local.name).into_iter().collect()
                    }
                    None => self.nodes(),
                };
                for node in nodes {
                    if selection.matches_node(&node) {
                        membership.add(&node.ips);
                    }
                }
                self.node_selections.insert(id);
            }
            MemberKind::Entity => {
                for entity in self.entities.values() {
                    if selection.matches_entity(entity, self.namespace_labels(&entity.namespace)) {
                        membership.add(&entity.ips);
                    }
                }
                self.entity_selections.insert(id);
            }
        }
        membership.settle();
        self.memberships[id as usize] = Some(membership);
        self.ids.insert(selection, id);
        id
    }

    /// Pods that may match a Pod selection: those of its Namespaces, or
    /// of its rarest `matchLabels` pair, or all.
    fn pod_candidates(&self, selection: &Selection) -> Vec<PodId> {
        let in_namespaces = |names: &[&str]| -> Vec<PodId> {
            names
                .iter()
                .filter_map(|n| self.pods_by_namespace.get(*n))
                .flatten()
                .copied()
                .collect()
        };
        match selection {
            Selection::ServiceAccount { namespace, .. } => in_namespaces(&[namespace]),
            Selection::Pods {
                namespaces: NamespaceScope::Names(names),
                ..
            } => in_namespaces(&names.iter().map(String::as_str).collect::<Vec<_>>()),
            Selection::Pods {
                pods: Some(selector),
                ..
            } if !selector.match_labels.is_empty() => {
                let mut best: Option<&HashSet<PodId>> = None;
                let empty = HashSet::new();
                for (k, v) in &selector.match_labels {
                    let posting = self
                        .pods_by_label
                        .get(k)
                        .and_then(|values| values.get(v))
                        .unwrap_or(&empty);
                    if best.is_none_or(|b| posting.len() < b.len()) {
                        best = Some(posting);
                    }
                }
                best.map(|b| b.iter().copied().collect())
                    .unwrap_or_default()
            }
            _ => (0..self.pods.len() as PodId).collect(),
        }
    }

    /// The ids of the Pod selections a Pod of Namespace `ns` may change.
    fn pod_selections_for(&self, ns: &str) -> Vec<u32> {
        self.pod_scoped
            .get(ns)
            .into_iter()
            .flatten()
            .chain(&self.pod_unscoped)
            .copied()
            .collect()
    }

    fn set_pod(&mut self, namespace: String, name: String, pod: Option<PodEntry>) {
        let key = (namespace, name);
        let held = self
            .pod_ids
            .get(&key)
            .and_then(|&id| self.pods[id as usize].as_ref());
        if held == pod.as_ref() {
            return;
        }
        let old = held.cloned();
        self.revision += 1;
        let old_labels = old
            .as_ref()
            .and_then(|o| self.namespace_labels(&o.namespace).cloned());
        if let Some(old) = &old {
            self.unindex_pod(&key, old);
        }
        if let Some(new) = &pod {
            self.index_pod(&key, new.clone());
        }
        // Membership of every selection that may have seen either version.
        let mut candidates: BTreeSet<u32> = BTreeSet::new();
        for version in old.iter().chain(pod.iter()) {
            candidates.extend(self.pod_selections_for(&version.namespace));
        }
        for id in candidates {
            let Some(membership) = self.memberships[id as usize].as_mut() else {
                continue;
            };
            let was = old
                .as_ref()
                .filter(|o| membership.selection.matches_pod(o, old_labels.as_ref()));
            let now = pod.as_ref().filter(|p| {
                let labels = self
                    .namespaces
                    .get(&p.namespace)
                    .map(NamespaceState::labels);
                membership.selection.matches_pod(p, labels)
            });
            membership.moved(was.map(|o| o.ips.as_slice()), now.map(|p| p.ips.as_slice()));
        }
        self.directory_pod(&key, old.as_ref(), pod.as_ref());
    }

    fn index_pod(&mut self, key: &(String, String), pod: PodEntry) {
        let id = match self.pod_ids.get(key) {
            Some(&id) => id,
            None => {
                let id = self.free.pop().unwrap_or_else(|| {
                    self.pods.push(None);
                    (self.pods.len() - 1) as PodId
                });
                self.pod_ids.insert(key.clone(), id);
                id
            }
        };
        self.pods_by_namespace
            .entry(pod.namespace.clone())
            .or_default()
            .insert(id);
        for (k, v) in &pod.labels {
            self.pods_by_label
                .entry(k.clone())
                .or_default()
                .entry(v.clone())
                .or_default()
                .insert(id);
        }
        self.join_namespace(&pod.namespace);
        if pod.is_on(&self.local.name) {
            self.local_pods.insert(key.clone(), id);
        }
        self.pods[id as usize] = Some(pod);
    }

    fn unindex_pod(&mut self, key: &(String, String), pod: &PodEntry) {
        let Some(id) = self.pod_ids.remove(key) else {
            return;
        };
        if let Some(ids) = self.pods_by_namespace.get_mut(&pod.namespace) {
            ids.remove(&id);
            if ids.is_empty() {
                self.pods_by_namespace.remove(&pod.namespace);
            }
        }
        for (k, v) in &pod.labels {
            if let Some(values) = self.pods_by_label.get_mut(k) {
                if let Some(ids) = values.get_mut(v) {
                    ids.remove(&id);
                    if ids.is_empty() {
                        values.remove(v);
                    }
                }
                if values.is_empty() {
                    self.pods_by_label.remove(k);
                }
            }
        }
        self.pods[id as usize] = None;
        self.local_pods.remove(key);
        self.free.push(id);
        self.leave_namespace(&pod.namespace);
    }

    fn join_namespace(&mut self, ns: &str) {
        let state = self
            .namespaces
            .entry(ns.to_string())
            .or_insert_with(|| NamespaceState {
                implicit: name_label(ns),
                ..NamespaceState::default()
            });
        state.members += 1;
        if state.members == 1 {
            self.view_namespace(ns);
        }
    }

    fn leave_namespace(&mut self, ns: &str) {
        if let Some(state) = self.namespaces.get_mut(ns) {
            state.members -= 1;
            if state.members == 0 && state.object.is_none() {
                self.namespaces.remove(ns);
                self.view_namespace(ns);
            }
        }
    }

    fn set_namespace(&mut self, name: String, labels: Option<Labels>) {
        let before = self.namespace_labels(&name).cloned();
        let state = self
            .namespaces
            .entry(name.clone())
            .or_insert_with(|| NamespaceState {
                implicit: name_label(&name),
                ..NamespaceState::default()
            });
        state.object = labels;
        if state.object.is_none() && state.members == 0 {
            self.namespaces.remove(&name);
        }
        self.view_namespace(&name);
        let after = self.namespace_labels(&name).cloned();
        if before == after {
            return;
        }
        self.revision += 1;
        // Only selections that read Namespace labels can change.
        let readers: Vec<u32> = self
            .memberships
            .iter()
            .flatten()
            .filter(|m| m.selection.reads_namespace_labels())
            .map(|m| self.ids[&m.selection])
            .collect();
        if readers.is_empty() {
            return;
        }
        // In controller mode Pod selections read the published groups.
        let pods: Vec<PodEntry> = self
            .pods_by_namespace
            .get(&name)
            .filter(|_| self.published.is_none())
            .into_iter()
            .flatten()
            .filter_map(|&id| self.pods[id as usize].clone())
            .collect();
        let entities: Vec<ExternalEntry> = self
            .entities
            .values()
            .filter(|e| e.namespace == name)
            .cloned()
            .collect();
        for id in readers {
            let Some(membership) = self.memberships[id as usize].as_mut() else {
                continue;
            };
            for pod in &pods {
                let was = membership.selection.matches_pod(pod, before.as_ref());
                let now = membership.selection.matches_pod(pod, after.as_ref());
                membership.moved(
                    was.then_some(pod.ips.as_slice()),
                    now.then_some(pod.ips.as_slice()),
                );
            }
            for entity in &entities {
                let was = membership.selection.matches_entity(entity, before.as_ref());
                let now = membership.selection.matches_entity(entity, after.as_ref());
                membership.moved(
                    was.then_some(entity.ips.as_slice()),
                    now.then_some(entity.ips.as_slice()),
                );
            }
        }
    }

    fn set_entity(&mut self, namespace: String, name: String, entity: Option<ExternalEntry>) {
        let key = (namespace, name);
        let old = self.entities.get(&key).cloned();
        if old == entity {
            return;
        }
        self.revision += 1;
        let local = self.local.name.clone();
        let touches_local = old
            .iter()
            .chain(entity.iter())
            .any(|e| e.external_node.as_deref() == Some(local.as_str()));
        let local_before = touches_local.then(|| self.counted_node(&local)).flatten();
        let old_labels = old
            .as_ref()
            .and_then(|o| self.namespace_labels(&o.namespace).cloned());
        if let Some(old) = &old {
            self.entities.remove(&key);
            self.leave_namespace(&old.namespace);
        }
        if let Some(new) = &entity {
            self.join_namespace(&new.namespace);
            self.entities.insert(key.clone(), new.clone());
        }
        let ids: Vec<u32> = self.entity_selections.iter().copied().collect();
        for id in ids {
            let Some(membership) = self.memberships[id as usize].as_mut() else {
                continue;
            };
            let was = old
                .as_ref()
                .filter(|o| membership.selection.matches_entity(o, old_labels.as_ref()));
            let now = entity.as_ref().filter(|e| {
                let labels = self
                    .namespaces
                    .get(&e.namespace)
                    .map(NamespaceState::labels);
                membership.selection.matches_entity(e, labels)
            });
            membership.moved(was.map(|o| o.ips.as_slice()), now.map(|e| e.ips.as_slice()));
        }
        let name = format!("{}/{}", key.0, key.1);
        let ips = |e: Option<&ExternalEntry>| e.map(|e| e.ips.clone());
        if ips(old.as_ref()) != ips(entity.as_ref()) {
            Names::set(
                &mut self.names.entities,
                name,
                entity.as_ref().map(|e| e.ips.as_slice()),
            );
            self.directory_changes += 1;
        }
        if touches_local {
            self.node_moved(&local, local_before);
        }
    }

    /// Node `name` as its selections count it: in controller mode only
    /// the local Node is read from the inventory (the others' addresses
    /// come from the groups the controller publishes, and the agent
    /// watches its own Node alone); in watch mode, every Node.
    fn counted_node(&self, name: &str) -> Option<NodeEntry> {
        if self.published.is_some() && name != self.local.name {
            return None;
        }
        self.effective_node(name)
    }

    /// Node `name` was `before` ([`Selections::counted_node`]): moves it
    /// in the Node selections and the names.
    fn node_moved(&mut self, name: &str, before: Option<NodeEntry>) {
        let after = self.counted_node(name);
        if before == after {
            return;
        }
        self.revision += 1;
        let ids: Vec<u32> = self.node_selections.iter().copied().collect();
        for id in ids {
            let Some(membership) = self.memberships[id as usize].as_mut() else {
                continue;
            };
            let was = before
                .as_ref()
                .filter(|n| membership.selection.matches_node(n));
            let now = after
                .as_ref()
                .filter(|n| membership.selection.matches_node(n));
            membership.moved(was.map(|n| n.ips.as_slice()), now.map(|n| n.ips.as_slice()));
        }
        let ips = |n: &Option<NodeEntry>| n.as_ref().map(|n| n.ips.clone());
        if ips(&before) != ips(&after) {
            Names::set(
                &mut self.names.main,
                format!("node:{name}"),
                after.as_ref().map(|n| n.ips.as_slice()),
            );
            self.directory_changes += 1;
        }
    }
}

/// The one Namespace a Pod selection looks in, if it looks in one.
pub(super) fn single_namespace(selection: &Selection) -> Option<&str> {
    match selection {
        Selection::ServiceAccount { namespace, .. } => Some(namespace),
        Selection::Pods {
            namespaces: NamespaceScope::Names(names),
            ..
        } if names.len() == 1 => Some(&names[0]),
        _ => None,
    }
}
