//! [`Publisher`]: the `tollgate controller`'s state between API writes —
//! for each Pod and Node selection the policies use, its members (Pods
//! and Nodes reduced to [`GroupMember`]s, kept as Pods, Namespaces and
//! Nodes change), their placement
//! in slices of at most [`SLICE_MEMBERS`], and what the API server holds,
//! so that it hands out only the [`Write`]s that bring the API server's
//! AddressGroups to that state.
//!
//! Placement is stable: a member stays in its slice while it is a member
//! (a change of its addresses or named ports rewrites that slice alone); a
//! new member goes to the first slice with room; slice 0 always exists. A
//! Pod or Node change that moves no address, named port or membership (a
//! status write) changes no slice and writes nothing. After a restart or a change
//! of leader, [`Publisher::adopt`] takes the slices the API server holds:
//! members stay where they are found, and only the slices that differ are
//! written. Pure: no I/O, no clock; it never decides which selections are
//! in use (the compiler's span does, [`crate::compile::published_selections`])
//! and never reads an ExternalEntity.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use smallvec::SmallVec;

use crate::compile::{LocalNode, PodShape};
use crate::model::Snapshot;

use super::group::{
    canonical, key, slice_name, AddressGroupSpec, GroupMember, GroupNamedPort, SLICE_MEMBERS,
};
use super::index::single_namespace;
use super::{Delta, MemberKind, NodeEntry, PodEntry, Selection, Selections};

/// What a member stands for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Holder {
    /// A Pod: its Namespace and name.
    Pod(String, String),
    /// A Node: its name.
    Node(String),
}

/// One write to the API server: a whole AddressGroup slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Create slice `name` of the selection keyed `key`.
    Create {
        name: String,
        key: String,
        spec: AddressGroupSpec,
    },
    /// Replace slice `name`'s spec.
    Update {
        name: String,
        key: String,
        spec: AddressGroupSpec,
    },
    /// Delete slice `name`.
    Delete { name: String },
}

impl Write {
    /// When the write is made: every write of a phase before any of the
    /// next, those of one phase in any order (at once). A selection's
    /// other slices are created or updated first (phase 0), then its slice
    /// 0, which lists them (1), then the slices no longer listed are
    /// deleted (2): an agent that holds a slice 0 holds, or is waiting
    /// for, every slice it lists, and never reads a selection as complete
    /// while a listed slice is still unwritten.
    pub fn phase(&self) -> u8 {
        match self {
            Write::Create { spec, .. } | Write::Update { spec, .. } => u8::from(spec.slice == 0),
            Write::Delete { .. } => 2,
        }
    }

    /// The slice written.
    pub fn name(&self) -> &str {
        match self {
            Write::Create { name, .. } | Write::Update { name, .. } | Write::Delete { name } => {
                name
            }
        }
    }
}

/// A Pod as a member of a selection: its addresses and named ports, in
/// the normal form (sorted); `None` for a Pod without an address (it
/// adds nothing to a peer).
pub fn member_of(pod: &PodEntry) -> Option<GroupMember> {
    let named_ports = pod
        .named_ports
        .iter()
        .map(|(name, protocol, port)| GroupNamedPort {
            name: name.clone(),
            protocol: *protocol,
            port: *port,
        })
        .collect();
    member(&pod.ips, named_ports)
}

/// A Node as a member of a Node selection: its addresses, sorted; `None`
/// for a Node without one.
pub fn node_member(node: &NodeEntry) -> Option<GroupMember> {
    member(&node.ips, Vec::new())
}

/// A member in the normal form: addresses and named ports sorted, each
/// once; `None` without an address.
fn member(ips: &[IpAddr], mut named_ports: Vec<GroupNamedPort>) -> Option<GroupMember> {
    if ips.is_empty() {
        return None;
    }
    let mut ips = SmallVec::from_slice(ips);
    ips.sort_unstable();
    ips.dedup();
    named_ports.sort_unstable();
    named_ports.dedup();
    Some(GroupMember {
        ips,
        named_ports: named_ports.into(),
    })
}

/// Whether the publisher keeps groups of `selection`: Pod and Node
/// selections (ExternalEntities are watched by every agent).
fn published(selection: &Selection) -> bool {
    selection.member_kind() != MemberKind::Entity
}

/// One published selection.
#[derive(Debug)]
struct Group {
    selection: Selection,
    canonical: String,
    /// Each member's slice and published form.
    members: HashMap<Holder, (u32, GroupMember)>,
    /// Each slice's members; slice 0 is always here.
    slices: BTreeMap<u32, BTreeSet<Holder>>,
}

impl Group {
    /// The spec of slice `slice` as it should be; `None` when it should
    /// not exist (an empty slice but slice 0).
    fn spec(&self, slice: u32) -> Option<AddressGroupSpec> {
        let keys = self.slices.get(&slice)?;
        if keys.is_empty() && slice != 0 {
            return None;
        }
        let mut members: Vec<GroupMember> =
            keys.iter().map(|k| self.members[k].1.clone()).collect();
        members.sort_unstable();
        let slices = if slice == 0 {
            self.slices
                .iter()
                .filter(|(&n, keys)| n != 0 && !keys.is_empty())
                .map(|(&n, _)| n)
                .collect()
        } else {
            Vec::new()
        };
        Some(AddressGroupSpec {
            selection: self.canonical.clone(),
            slice,
            slices,
            members,
        })
    }

    /// The first slice with room (a new one at the lowest free number
    /// when all are full).
    fn room(&self) -> u32 {
        if let Some((&slice, _)) = self.slices.iter().find(|(_, m)| m.len() < SLICE_MEMBERS) {
            return slice;
        }
        (0..).find(|n| !self.slices.contains_key(n)).unwrap_or(0)
    }

    /// Puts `holder` in or out of the group as `member` says; the slice
    /// touched, if any.
    fn set(&mut self, holder: &Holder, member: Option<GroupMember>) -> Option<u32> {
        match (self.members.get_mut(holder), member) {
            (None, None) => None,
            (Some((slice, held)), Some(member)) => {
                if *held == member {
                    return None;
                }
                *held = member;
                Some(*slice)
            }
            (Some(_), None) => {
                let (slice, _) = self.members.remove(holder)?;
                if let Some(keys) = self.slices.get_mut(&slice) {
                    keys.remove(holder);
                    if keys.is_empty() && slice != 0 {
                        self.slices.remove(&slice);
                    }
                }
                Some(slice)
            }
            (None, Some(member)) => {
                let slice = self.room();
                self.slices.entry(slice).or_default().insert(holder.clone());
                self.members.insert(holder.clone(), (slice, member));
                Some(slice)
            }
        }
    }
}

/// The controller's publishing state: the Pods, Namespaces and Nodes, the
/// groups of the selections in use, and the slices the API server holds.
pub struct Publisher {
    inventory: Selections,
    /// How many Pods there are of each shape.
    shapes: BTreeMap<PodShape, u32>,
    shapes_changed: bool,
    /// Groups by selection key.
    groups: BTreeMap<String, Group>,
    /// Keys of the selections that look in one Namespace, by Namespace.
    scoped: HashMap<String, BTreeSet<String>>,
    /// Keys of the Pod selections that look in several.
    unscoped: BTreeSet<String>,
    /// Keys of the Node selections.
    nodes: BTreeSet<String>,
    /// The slices the API server holds, by name, as last read or written.
    remote: BTreeMap<String, AddressGroupSpec>,
    /// Slices to compare with the API server's at the next
    /// [`Publisher::writes`].
    dirty: BTreeSet<String>,
}

impl Default for Publisher {
    fn default() -> Publisher {
        Publisher::new()
    }
}

impl Publisher {
    /// No Pod, no selection, nothing known of the API server.
    pub fn new() -> Publisher {
        Publisher {
            inventory: Selections::new(&Snapshot::default(), &LocalNode::default()),
            shapes: BTreeMap::new(),
            shapes_changed: false,
            groups: BTreeMap::new(),
            scoped: HashMap::new(),
            unscoped: BTreeSet::new(),
            nodes: BTreeSet::new(),
            remote: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    /// The shapes of the Pods held, for [`crate::compile::published_selections`].
    pub fn shapes(&self) -> impl Iterator<Item = &PodShape> {
        self.shapes.keys()
    }

    /// Whether the set of shapes changed since last asked (the selections
    /// in use may have).
    pub fn take_shapes_changed(&mut self) -> bool {
        std::mem::take(&mut self.shapes_changed)
    }

    /// Applies a Pod, Namespace or Node change (ExternalEntities are
    /// never published: theirs is ignored).
    pub fn apply(&mut self, delta: Delta) {
        match delta {
            Delta::Pod {
                namespace,
                name,
                pod,
            } => self.set_pod(namespace, name, pod),
            Delta::Namespace { name, labels } => {
                let before = self.inventory.namespace_labels(&name).cloned();
                self.inventory.apply(Delta::Namespace {
                    name: name.clone(),
                    labels,
                });
                if self.inventory.namespace_labels(&name) != before.as_ref() {
                    self.namespace_moved(&name);
                }
            }
            Delta::Node { name, node } => self.set_node(name, node),
            Delta::Entity { .. } => {}
        }
    }

    fn set_node(&mut self, name: String, node: Option<NodeEntry>) {
        let before = self.inventory.effective_node(&name);
        self.inventory.apply(Delta::Node {
            name: name.clone(),
            node,
        });
        let after = self.inventory.effective_node(&name);
        if before == after {
            return;
        }
        let holder = Holder::Node(name);
        for group_key in &self.nodes {
            let Some(group) = self.groups.get_mut(group_key) else {
                continue;
            };
            let member = after
                .as_ref()
                .filter(|n| group.selection.matches_node(n))
                .and_then(node_member);
            if let Some(slice) = group.set(&holder, member) {
                self.dirty.insert(slice_name(group_key, slice));
            }
        }
    }

    fn set_pod(&mut self, namespace: String, name: String, pod: Option<PodEntry>) {
        let old = self.inventory.pod(&namespace, &name).cloned();
        if old == pod {
            return;
        }
        let shape = |p: &Option<PodEntry>| p.as_ref().map(PodShape::of);
        let (old_shape, new_shape) = (shape(&old), shape(&pod));
        if old_shape != new_shape {
            if let Some(s) = old_shape {
                if let Some(count) = self.shapes.get_mut(&s) {
                    *count -= 1;
                    if *count == 0 {
                        self.shapes.remove(&s);
                        self.shapes_changed = true;
                    }
                }
            }
            if let Some(s) = new_shape {
                let count = self.shapes.entry(s).or_insert(0);
                *count += 1;
                self.shapes_changed |= *count == 1;
            }
        }
        self.inventory.apply(Delta::Pod {
            namespace: namespace.clone(),
            name: name.clone(),
            pod: pod.clone(),
        });
        let keys: Vec<String> = self
            .scoped
            .get(&namespace)
            .into_iter()
            .flatten()
            .chain(&self.unscoped)
            .cloned()
            .collect();
        let holder = Holder::Pod(namespace, name);
        for group_key in keys {
            self.refresh_member(&group_key, &holder, pod.as_ref());
        }
    }

    /// Puts the Pod `holder` (now `pod`) in or out of group `group_key`.
    fn refresh_member(&mut self, group_key: &str, holder: &Holder, pod: Option<&PodEntry>) {
        let Some(group) = self.groups.get_mut(group_key) else {
            return;
        };
        let labels = pod.and_then(|p| self.inventory.namespace_labels(&p.namespace));
        let member = pod
            .filter(|p| group.selection.matches_pod(p, labels))
            .and_then(member_of);
        if let Some(slice) = group.set(holder, member) {
            self.dirty.insert(slice_name(group_key, slice));
        }
    }

    /// Namespace `name`'s labels changed: the groups that read them take
    /// its Pods again.
    fn namespace_moved(&mut self, name: &str) {
        let readers: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| g.selection.reads_namespace_labels())
            .map(|(k, _)| k.clone())
            .collect();
        if readers.is_empty() {
            return;
        }
        let pods: Vec<PodEntry> = self.inventory.pods_in(name).cloned().collect();
        for group_key in readers {
            for pod in &pods {
                let holder = Holder::Pod(pod.namespace.clone(), pod.name.clone());
                self.refresh_member(&group_key, &holder, Some(pod));
            }
        }
    }

    /// Sets the selections in use: new ones are published (their members
    /// placed where the API server holds them, if it does), those no
    /// longer in use are deleted. Selections of ExternalEntities are
    /// ignored.
    pub fn set_selections(&mut self, selections: impl IntoIterator<Item = Selection>) {
        let wanted: BTreeMap<String, Selection> = selections
            .into_iter()
            .filter(published)
            .map(|s| (key(&s), s))
            .collect();
        let gone: Vec<String> = self
            .groups
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for group_key in gone {
            self.stop(&group_key);
        }
        for (group_key, selection) in wanted {
            if !self.groups.contains_key(&group_key) {
                self.start(group_key, selection);
            }
        }
    }

    fn start(&mut self, group_key: String, selection: Selection) {
        match (selection.member_kind(), single_namespace(&selection)) {
            (MemberKind::Node, _) => {
                self.nodes.insert(group_key.clone());
            }
            (_, Some(ns)) => {
                self.scoped
                    .entry(ns.to_string())
                    .or_default()
                    .insert(group_key.clone());
            }
            (_, None) => {
                self.unscoped.insert(group_key.clone());
            }
        }
        let group = self.place(&group_key, selection);
        self.groups.insert(group_key.clone(), group);
        self.mark_all(&group_key);
    }

    fn stop(&mut self, group_key: &str) {
        let Some(group) = self.groups.remove(group_key) else {
            return;
        };
        match (
            group.selection.member_kind(),
            single_namespace(&group.selection),
        ) {
            (MemberKind::Node, _) => {
                self.nodes.remove(group_key);
            }
            (_, Some(ns)) => {
                if let Some(keys) = self.scoped.get_mut(ns) {
                    keys.remove(group_key);
                    if keys.is_empty() {
                        self.scoped.remove(ns);
                    }
                }
            }
            (_, None) => {
                self.unscoped.remove(group_key);
            }
        }
        self.mark_all(group_key);
        for slice in group.slices.keys() {
            self.dirty.insert(slice_name(group_key, *slice));
        }
    }

    /// The group of `selection` with its members placed: each in a slice
    /// the API server holds it in, when one holds an equal member and has
    /// room, else in the first slice with room.
    fn place(&self, group_key: &str, selection: Selection) -> Group {
        let mut group = Group {
            canonical: canonical(&selection),
            selection,
            members: HashMap::new(),
            slices: BTreeMap::from([(0, BTreeSet::new())]),
        };
        // What the API server holds of it: member → slices, one entry per
        // copy (two Pods may publish equal members).
        let mut held: BTreeMap<GroupMember, Vec<u32>> = BTreeMap::new();
        for (_, spec) in self.remote_slices(group_key) {
            if spec.selection != group.canonical {
                continue;
            }
            for member in &spec.members {
                held.entry(member.clone()).or_default().push(spec.slice);
            }
        }
        let mut members: Vec<(Holder, GroupMember)> = match group.selection.member_kind() {
            MemberKind::Node => self
                .inventory
                .nodes()
                .into_iter()
                .filter(|n| group.selection.matches_node(n))
                .filter_map(|n| Some((Holder::Node(n.name.clone()), node_member(&n)?)))
                .collect(),
            _ => self
                .inventory
                .pod_members(&group.selection)
                .into_iter()
                .filter_map(|p| {
                    let holder = Holder::Pod(p.namespace.clone(), p.name.clone());
                    Some((holder, member_of(p)?))
                })
                .collect(),
        };
        members.sort();
        let mut unplaced = Vec::new();
        for (pod, member) in members {
            let found = held.get_mut(&member).and_then(|slices| {
                let at = slices
                    .iter()
                    .position(|s| group.slices.get(s).is_none_or(|m| m.len() < SLICE_MEMBERS))?;
                Some(slices.swap_remove(at))
            });
            match found {
                Some(slice) => {
                    group.slices.entry(slice).or_default().insert(pod.clone());
                    group.members.insert(pod, (slice, member));
                }
                None => unplaced.push((pod, member)),
            }
        }
        for (pod, member) in unplaced {
            group.set(&pod, Some(member));
        }
        group
    }

    /// The slices the API server holds of the selection keyed `group_key`.
    fn remote_slices<'a>(
        &'a self,
        group_key: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a AddressGroupSpec)> + 'a {
        let prefix = format!("{group_key}-");
        self.remote
            .range(prefix.clone()..)
            .take_while(move |(name, _)| name.starts_with(&prefix))
    }

    /// Marks every slice of `group_key` the API server or the group holds.
    fn mark_all(&mut self, group_key: &str) {
        let names: Vec<String> = self
            .remote_slices(group_key)
            .map(|(n, _)| n.clone())
            .collect();
        self.dirty.extend(names);
        if let Some(group) = self.groups.get(group_key) {
            for slice in group.slices.keys() {
                self.dirty.insert(slice_name(group_key, *slice));
            }
        }
    }

    /// Takes what the API server holds (the AddressGroups listed, by name;
    /// after a restart, a change of leader or a failed write): every
    /// group's members are placed again where they are found, and the
    /// next [`Publisher::writes`] brings back only the slices that differ,
    /// deleting those of selections not in use.
    pub fn adopt(&mut self, slices: impl IntoIterator<Item = (String, AddressGroupSpec)>) {
        self.remote = slices.into_iter().collect();
        self.dirty.extend(self.remote.keys().cloned());
        let groups = std::mem::take(&mut self.groups);
        for (group_key, group) in groups {
            let placed = self.place(&group_key, group.selection);
            self.groups.insert(group_key.clone(), placed);
            self.mark_all(&group_key);
        }
    }

    /// The writes that bring the API server's slices to the groups' state,
    /// in phase order ([`Write::phase`]), taken as done: a write that
    /// fails must be followed by a fresh list
    /// and [`Publisher::adopt`]. Only to be asked once the Pods,
    /// Namespaces and policies are completely known: before, a selection
    /// not yet computed would be deleted.
    pub fn writes(&mut self) -> Vec<Write> {
        let mut writes = Vec::new();
        let mut dirty = std::mem::take(&mut self.dirty);
        // A slice that comes or goes changes its selection's slice 0,
        // which lists the others.
        let firsts: Vec<String> = dirty
            .iter()
            .filter_map(|name| name.rsplit_once('-'))
            .filter(|(_, n)| *n != "0")
            .map(|(key, _)| slice_name(key, 0))
            .collect();
        dirty.extend(firsts);
        for name in dirty {
            let want = name
                .rsplit_once('-')
                .and_then(|(k, n)| Some((self.groups.get(k)?, n.parse::<u32>().ok()?)))
                .and_then(|(group, slice)| group.spec(slice));
            let group_key = name.rsplit_once('-').map_or("", |(k, _)| k).to_string();
            match (self.remote.get(&name), want) {
                (None, None) => {}
                (Some(_), None) => {
                    self.remote.remove(&name);
                    writes.push(Write::Delete { name });
                }
                (held, Some(spec)) => {
                    if held.is_some_and(|h| same(h, &spec)) {
                        continue;
                    }
                    let write = if held.is_some() {
                        Write::Update {
                            name: name.clone(),
                            key: group_key,
                            spec: spec.clone(),
                        }
                    } else {
                        Write::Create {
                            name: name.clone(),
                            key: group_key,
                            spec: spec.clone(),
                        }
                    };
                    self.remote.insert(name, spec);
                    writes.push(write);
                }
            }
        }
        writes.sort_by_key(Write::phase);
        writes
    }
}

/// Whether two specs publish the same members (in any order).
fn same(held: &AddressGroupSpec, want: &AddressGroupSpec) -> bool {
    if held.selection != want.selection
        || held.slice != want.slice
        || held.slices != want.slices
        || held.members.len() != want.members.len()
    {
        return false;
    }
    let mut members = held.members.clone();
    members.sort_unstable();
    members == want.members
}

#[cfg(test)]
mod tests;
