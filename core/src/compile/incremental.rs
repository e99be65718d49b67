//! [`Incremental`]: the compiler kept across changes. It holds the policy
//! side of the last snapshot (everything but Pods, Nodes and
//! ExternalEntities), the inventory as [`Selections`], and the ruleset last
//! built. A change is sorted by what it can touch:
//!
//! - a Pod, Node or ExternalEntity of another Node only moves peer
//!   addresses: the selections whose members changed get new sets, and the
//!   last ruleset is patched (its rules that use them, then the index
//!   tables that hold those);
//! - a local one, the labels of a Namespace that holds a local endpoint,
//!   the Namespace annotation that audits Kubernetes NetworkPolicies, or
//!   any other policy-side object changes what applies where: the rules
//!   are assembled again over the local endpoints, reading every peer set
//!   from the selections (none is recomputed from the Pods);
//! - the labels of a Namespace without a local endpoint only move peers
//!   (the selections that look in it), as a remote Pod does: appliedTo,
//!   `Self` and `sameLabels` read the Namespaces of local endpoints only;
//! - a change that moves no member, name or endpoint (a status write)
//!   changes nothing and yields no ruleset.
//!
//! The result always equals [`super::compile`] of the same objects (a
//! property test checks it).
//!
//! In controller mode ([`Incremental::controller`]) the inventory holds
//! the local Node's Pods only, and the members of Pod selections come from
//! the published AddressGroup slices handed to [`Incremental::set_groups`]
//! (whole) or [`Incremental::patch_groups`] (by difference, as the agent
//! does).
//! A ruleset is built only when every Pod selection it uses is complete
//! (slice 0 and each slice it lists received); until then [`Incremental::ruleset`] yields none,
//! the last ruleset stays in force, and [`Incremental::waiting`] names the
//! keys awaited: a group not received is never read as empty. With the
//! groups a controller publishes for a snapshot, the ruleset equals the
//! watch-mode one of that snapshot but for the names of remote Pods, which
//! groups do not carry (a property test checks it). Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::{Kind, Object, Snapshot, Sourced};
use crate::ruleset::Ruleset;
use crate::selection::group::{key_of, AddressGroupSpec};
use crate::selection::{members, Delta, Labels, Selection, Selections};

use super::k8s::logged_namespaces;
use super::{assemble_placed, LocalNode, LocalView, Placements};

/// What a change touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Update {
    /// Nothing any rule, set or endpoint reads.
    Unchanged,
    /// Peer addresses (or names) only.
    Peers,
    /// What applies where: the rules are assembled again.
    Rules,
}

/// The compiler's state between changes.
pub struct Incremental {
    /// The policy side: every object but Pods, Nodes and ExternalEntities.
    policies: Arc<Snapshot>,
    /// Namespace labels as last applied to `selections`.
    namespaces: BTreeMap<String, Labels>,
    /// The Namespaces whose Kubernetes NetworkPolicies are audited, in
    /// `policies`.
    logged: BTreeSet<String>,
    selections: Selections,
    last: Option<Arc<Ruleset>>,
    pending: Update,
    /// `selections.directory_version()` when `last` was built.
    directory: u64,
    /// The last snapshot [`Incremental::update`] was handed.
    snapshot: Option<Arc<Snapshot>>,
    /// Controller mode: the last assembly used a Pod selection not yet
    /// complete, so its ruleset was not taken (the last one stays).
    blocked: bool,
    /// The Antrea policies the last assemblies placed on no local
    /// endpoint. Told of every change but an edit of Antrea policies
    /// alone: a policy edit anywhere in the cluster assembles again, and
    /// the policies it did not touch are then only ranked.
    placements: Placements,
}

/// Whether objects of `kind` are inventory the selections keep (and not
/// part of the policy side).
fn is_member_kind(kind: Kind) -> bool {
    matches!(kind, Kind::Pod | Kind::Node | Kind::ExternalEntity)
}

/// Whether objects of `kind` are Antrea policies, which [`Placements`]
/// keeps by object.
fn is_antrea_policy(kind: Kind) -> bool {
    matches!(kind, Kind::ClusterNetworkPolicy | Kind::AntreaNetworkPolicy)
}

impl Incremental {
    /// The compiler of `snapshot` for `local`; the first
    /// [`Incremental::ruleset`] assembles everything.
    pub fn new(snapshot: &Snapshot, local: &LocalNode) -> Incremental {
        Incremental::with(snapshot, Selections::new(snapshot, local))
    }

    /// The compiler in controller mode: `snapshot` holds the local Node's
    /// Pods only, and Pod selections read the groups handed to
    /// [`Incremental::set_groups`] or [`Incremental::patch_groups`]. The
    /// first [`Incremental::ruleset`]
    /// waits for them.
    pub fn controller(snapshot: &Snapshot, local: &LocalNode) -> Incremental {
        Incremental::with(snapshot, Selections::controller(snapshot, local))
    }

    fn with(snapshot: &Snapshot, selections: Selections) -> Incremental {
        let mut incremental = Incremental {
            policies: Arc::new(Snapshot::default()),
            namespaces: BTreeMap::new(),
            logged: BTreeSet::new(),
            selections,
            last: None,
            pending: Update::Rules,
            directory: 0,
            snapshot: None,
            blocked: false,
            placements: Placements::default(),
        };
        incremental.set_policies(policy_side(snapshot));
        incremental.pending = Update::Rules;
        incremental
    }

    /// The inventory as the selections hold it.
    pub fn selections(&self) -> &Selections {
        &self.selections
    }

    /// Replaces the policy side (every object of `snapshot` but Pods,
    /// Nodes and ExternalEntities, which come as deltas). Namespace label
    /// changes are applied to the selections; they assemble the rules
    /// again only for a Namespace that holds a local endpoint.
    pub fn set_policies(&mut self, snapshot: Snapshot) -> Update {
        // The Namespaces of the last policy side, by name: one handed
        // again (the same object, as a Kubernetes source hands what did
        // not change) keeps its labels unread.
        let mut before: HashMap<&str, &Arc<Object>> = self
            .policies
            .objects
            .iter()
            .filter_map(|o| match &*o.object {
                Object::Namespace(ns) => Some((ns.metadata.name.as_str(), &o.object)),
                _ => None,
            })
            .collect();
        let mut moved = Vec::new();
        for sourced in &snapshot.objects {
            let Object::Namespace(ns) = &*sourced.object else {
                continue;
            };
            let name = ns.metadata.name.as_str();
            if before
                .remove(name)
                .is_some_and(|was| Arc::ptr_eq(was, &sourced.object))
            {
                continue;
            }
            let labels = ns.effective_labels();
            if self.namespaces.get(name) != Some(&labels) {
                moved.push(name.to_string());
                self.selections.apply(Delta::Namespace {
                    name: name.to_string(),
                    labels: Some(labels.clone()),
                });
                self.namespaces.insert(name.to_string(), labels);
            }
        }
        for name in before.into_keys() {
            if self.namespaces.remove(name).is_some() {
                moved.push(name.to_string());
                self.selections.apply(Delta::Namespace {
                    name: name.to_string(),
                    labels: None,
                });
            }
        }
        let logged = logged_namespaces(&snapshot);
        let context = logged != self.logged || moved.iter().any(|ns| self.holds_local(ns));
        let same = same_except(&self.policies, &snapshot, |k| k == Kind::Namespace);
        let rules = context || !same;
        // Only when more than Namespaces changed: whether it was more
        // than Antrea policies.
        if context
            || (!same
                && !same_except(&self.policies, &snapshot, |k| {
                    k == Kind::Namespace || is_antrea_policy(k)
                }))
        {
            // Something placement reads (a group, a Service, a Tier, the
            // labels of a Namespace with local endpoints) may differ.
            self.placements.context_changed();
        }
        // Always: the next assembly reads the Namespaces held.
        self.policies = Arc::new(snapshot);
        self.logged = logged;
        let update = if rules {
            Update::Rules
        } else if self.peers_moved() {
            Update::Peers
        } else {
            Update::Unchanged
        };
        self.pending = self.pending.max(update);
        update
    }

    /// Whether a peer set or the directory of names moved since the last
    /// ruleset: what a patch of it would carry.
    fn peers_moved(&self) -> bool {
        self.selections.has_changes() || self.selections.directory_version() != self.directory
    }

    /// Whether Namespace `namespace` holds a local Pod or a local
    /// ExternalEntity: what appliedTo, `Self` and `sameLabels` read its
    /// labels for.
    fn holds_local(&self, namespace: &str) -> bool {
        let local = self.selections.local().name.as_str();
        self.selections
            .local_pods()
            .any(|p| p.namespace == namespace)
            || self
                .selections
                .entities()
                .any(|e| e.namespace == namespace && e.external_node.as_deref() == Some(local))
    }

    /// Applies an inventory change (a Pod, Node or ExternalEntity; a
    /// Namespace comes with the policy side).
    pub fn apply(&mut self, delta: Delta) -> Update {
        let Some(delta) = self.selections.changing(delta) else {
            return Update::Unchanged;
        };
        let local = &self.selections.local().name;
        let touches_local = match &delta {
            Delta::Pod {
                namespace,
                name,
                pod,
            } => {
                self.selections.is_local_pod(namespace, name)
                    || pod.as_ref().is_some_and(|p| p.is_on(local))
            }
            Delta::Node { name, .. } => name == local,
            Delta::Entity {
                namespace,
                name,
                entity,
            } => {
                let was = self
                    .selections
                    .entities()
                    .find(|e| e.namespace == *namespace && e.name == *name)
                    .and_then(|e| e.external_node.clone());
                was.as_deref() == Some(local)
                    || entity
                        .as_ref()
                        .is_some_and(|e| e.external_node.as_deref() == Some(local))
            }
            Delta::Namespace { .. } => true,
        };
        let local_before = touches_local.then(|| {
            (
                self.selections.local_pods().cloned().collect::<Vec<_>>(),
                self.selections.effective_node(local),
                self.selections.entities().cloned().collect::<Vec<_>>(),
            )
        });
        let revision = self.selections.revision();
        self.selections.apply(delta);
        if self.selections.revision() == revision {
            return Update::Unchanged;
        }
        let update = match local_before {
            Some((pods, node, entities)) => {
                let local = self.selections.local().name.clone();
                let same = pods.iter().eq(self.selections.local_pods())
                    && node == self.selections.effective_node(&local)
                    && entities.iter().eq(self.selections.entities());
                if same {
                    Update::Unchanged
                } else {
                    self.placements.context_changed();
                    Update::Rules
                }
            }
            None if self.peers_moved() => Update::Peers,
            None => Update::Unchanged,
        };
        self.pending = self.pending.max(update);
        update
    }

    /// Brings the compiler to `snapshot` seen from `local`, as a source
    /// that hands whole snapshots has them. Against the last snapshot
    /// handed, when it has as many objects: only the objects that differ
    /// at their place are applied (removed when another object took the
    /// place), and the policy side is replaced only when one of its
    /// objects differs. Otherwise, or when a Node differs (several
    /// objects may describe one), each inventory member is compared with
    /// what the selections hold and applied only where it differs, and
    /// the policy side is replaced.
    pub fn update(&mut self, snapshot: &Arc<Snapshot>, local: &LocalNode) -> Update {
        let update = self.set_local(local);
        let previous = self.snapshot.replace(Arc::clone(snapshot));
        // The same snapshot again (an agent in controller mode reloading
        // for its groups): nothing of it to compare.
        if previous.as_ref().is_some_and(|p| Arc::ptr_eq(p, snapshot)) {
            return update;
        }
        let differ: Option<Vec<usize>> = previous
            .as_deref()
            .filter(|p| p.objects.len() == snapshot.objects.len())
            .map(|p| {
                (0..p.objects.len())
                    .filter(|&i| p.objects[i] != snapshot.objects[i])
                    .collect()
            });
        let (Some(previous), Some(differ)) = (previous, differ) else {
            return update.max(self.update_whole(snapshot));
        };
        let pairs = || {
            differ
                .iter()
                .map(|&i| (&*previous.objects[i].object, &*snapshot.objects[i].object))
        };
        if pairs().any(|(a, b)| matches!(a, Object::Node(_)) || matches!(b, Object::Node(_))) {
            return update.max(self.update_whole(snapshot));
        }
        let mut update = update;
        if pairs().any(|(a, b)| !is_member_kind(a.kind()) || !is_member_kind(b.kind())) {
            update = update.max(self.set_policies(policy_side(snapshot)));
        }
        for (old, new) in pairs() {
            if is_member_kind(old.kind()) && old.object_ref() != new.object_ref() {
                let delta = Delta::delete(old).expect("a member kind");
                update = update.max(self.apply(delta));
            }
        }
        for (_, new) in pairs() {
            if is_member_kind(new.kind()) {
                let delta = Delta::apply(new).expect("a member kind");
                update = update.max(self.apply(delta));
            }
        }
        update
    }

    /// [`Incremental::update`] member by member.
    fn update_whole(&mut self, snapshot: &Snapshot) -> Update {
        let mut update = self.set_policies(policy_side(snapshot));
        let members = members(snapshot);
        for delta in self.selections.gone(&members) {
            update = update.max(self.apply(delta));
        }
        for delta in members {
            update = update.max(self.apply(delta));
        }
        update
    }

    /// Controller mode: brings the published groups held to `groups` (the
    /// AddressGroup slices received, each slice once): the slices that
    /// differ are put in place, those no longer there removed. A slice is
    /// filed under the key of its `selection` ([`key_of`]).
    pub fn set_groups<'a>(
        &mut self,
        groups: impl IntoIterator<Item = &'a Arc<AddressGroupSpec>>,
    ) -> Update {
        let mut given: BTreeMap<(String, u32), &Arc<AddressGroupSpec>> = BTreeMap::new();
        for spec in groups {
            given.insert((key_of(&spec.selection), spec.slice), spec);
        }
        let gone: Vec<(String, u32)> = self
            .selections
            .slices()
            .filter(|(key, slice)| !given.contains_key(&(key.to_string(), *slice)))
            .map(|(key, slice)| (key.to_string(), slice))
            .collect();
        self.put_slices(
            gone,
            given
                .into_iter()
                .map(|((key, slice), spec)| (key, slice, spec)),
        )
    }

    /// Controller mode: [`Incremental::set_groups`] by difference, for a
    /// caller that knows which AddressGroups changed since the groups it
    /// handed last: each as (what it was, what it is), `None` for absent.
    /// Comparing every slice held at each reload was a tenth of a wide
    /// agent's CPU at 150,000 Pods.
    pub fn patch_groups<'a>(
        &mut self,
        changes: impl IntoIterator<
            Item = (
                Option<&'a Arc<AddressGroupSpec>>,
                Option<&'a Arc<AddressGroupSpec>>,
            ),
        >,
    ) -> Update {
        let place = |spec: &AddressGroupSpec| (key_of(&spec.selection), spec.slice);
        let mut gone = Vec::new();
        let mut put = Vec::new();
        for (was, is) in changes {
            let now = is.map(|spec| (place(spec), spec));
            if let Some(was) = was.map(|was| place(was)) {
                if now.as_ref().is_none_or(|(at, _)| *at != was) {
                    gone.push(was);
                }
            }
            put.extend(now.map(|((key, slice), spec)| (key, slice, spec)));
        }
        self.put_slices(gone, put)
    }

    /// Removes the slices `gone`, then puts those `put`; the update they
    /// make.
    fn put_slices<'a>(
        &mut self,
        gone: impl IntoIterator<Item = (String, u32)>,
        put: impl IntoIterator<Item = (String, u32, &'a Arc<AddressGroupSpec>)>,
    ) -> Update {
        let mut changed = false;
        for (key, slice) in gone {
            changed |= self.selections.set_slice(&key, slice, None);
        }
        let directory = self.selections.directory_version();
        for (key, slice, spec) in put {
            changed |= self.selections.set_slice(&key, slice, Some(spec));
        }
        let update = if changed || self.selections.directory_version() != directory {
            Update::Peers
        } else {
            Update::Unchanged
        };
        self.pending = self.pending.max(update);
        update
    }

    /// Controller mode: the keys of the groups the last assembly used and
    /// has not received (slice 0 missing); while any is, no ruleset is
    /// built.
    pub fn waiting(&self) -> BTreeSet<String> {
        self.selections.waiting()
    }

    /// Controller mode: the keys of the groups the last assembly used,
    /// with their selections: what the source must subscribe to.
    pub fn needed(&self) -> BTreeMap<String, Selection> {
        self.selections.needed()
    }

    /// The local Node changed (labels, addresses).
    pub fn set_local(&mut self, local: &LocalNode) -> Update {
        if self.selections.local() == local {
            return Update::Unchanged;
        }
        self.selections.set_local(local);
        self.placements.context_changed();
        self.pending = Update::Rules;
        Update::Rules
    }

    /// The ruleset of the objects now, if anything changed since the last
    /// one (the first call always builds one).
    ///
    /// In controller mode, none while a Pod selection the rules use is
    /// waiting for its group ([`Incremental::waiting`]): the last ruleset
    /// stays, neither patched with an incomplete set nor assembled without
    /// one.
    pub fn ruleset(&mut self) -> Option<Arc<Ruleset>> {
        let mut update = std::mem::replace(&mut self.pending, Update::Unchanged);
        if self.blocked {
            // The selections in use are the blocked assembly's: a change
            // of peers alone completes it or leaves it waiting; anything
            // else may change which selections the rules use.
            match update {
                Update::Unchanged => return None,
                Update::Peers if !self.selections.waiting().is_empty() => return None,
                _ => update = Update::Rules,
            }
        }
        let ruleset = match (&self.last, update) {
            (Some(_), Update::Unchanged) => return None,
            (Some(last), Update::Peers) => {
                if !self.selections.waiting().is_empty() {
                    // A group in use went away: keep the last ruleset.
                    self.blocked = true;
                    return None;
                }
                let changed: HashMap<_, _> = self.selections.take_changed().into_iter().collect();
                if changed.is_empty() && self.selections.directory_version() == self.directory {
                    return None;
                }
                last.patched(
                    &changed,
                    self.selections.named_ports().clone(),
                    self.selections.names().clone(),
                )
            }
            _ => {
                self.selections.begin();
                let view = LocalView::of(&self.selections);
                let ruleset = assemble_placed(
                    &self.policies,
                    view,
                    &mut self.selections,
                    &mut self.placements,
                );
                self.selections.end();
                self.selections.take_changed();
                self.blocked = !self.selections.waiting().is_empty();
                if self.blocked {
                    return None;
                }
                ruleset
            }
        };
        self.directory = self.selections.directory_version();
        let ruleset = Arc::new(ruleset);
        self.last = Some(Arc::clone(&ruleset));
        Some(ruleset)
    }
}

/// Whether `a` and `b` hold the same objects but for those of the kinds
/// `skip` names (compared as shared objects first: a snapshot shares
/// every unchanged object with the last one).
fn same_except(a: &Snapshot, b: &Snapshot, skip: fn(Kind) -> bool) -> bool {
    fn rest(s: &Snapshot, skip: fn(Kind) -> bool) -> impl Iterator<Item = &Sourced> {
        s.objects.iter().filter(move |o| !skip(o.object.kind()))
    }
    let mut b_rest = rest(b, skip);
    rest(a, skip).all(|a| {
        b_rest.next().is_some_and(|b| {
            a.origin == b.origin && (Arc::ptr_eq(&a.object, &b.object) || a.object == b.object)
        })
    }) && b_rest.next().is_none()
}

/// The objects of `snapshot` that are not inventory members.
pub fn policy_side(snapshot: &Snapshot) -> Snapshot {
    Snapshot {
        objects: snapshot
            .objects
            .iter()
            .filter(|s| !is_member_kind(s.object.kind()))
            .cloned()
            .collect::<Vec<Sourced>>(),
    }
}

#[cfg(test)]
mod tests;
