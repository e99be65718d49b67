//! Controller mode in [`Selections`]: the members of Pod selections
//! ([`Selection::Pods`], [`Selection::ServiceAccount`]) and Node
//! selections ([`Selection::Nodes`]) come from the AddressGroup slices a
//! `tollgate controller` published ([`super::super::group`]), not from
//! the Pods and Nodes, which in that mode are the local Node's alone (the
//! local Node also counts itself, with its configured labels and the
//! host's addresses). A selection's set is the union of the received
//! slices of its key; a selection whose slice 0, or a slice its slice 0
//! lists, has not been received is *waiting*: its set is not complete,
//! and whoever compiles must not read it as empty, nor as holding only
//! the slices received. ExternalEntities are still read from the
//! inventory. Never talks to an API server.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::compile::LocalNode;
use crate::model::Snapshot;

use super::super::group::{self, AddressGroupSpec, GroupMember};
use super::super::membership::Membership;
use super::super::{NamedPort, Selection};
use super::named::PortsAt;
use super::Selections;

/// The slices received, by selection key, and which selection in use
/// reads each key.
#[derive(Debug, Default)]
pub(super) struct Published {
    /// Shared with whoever handed them (the agent's source holds the
    /// same slices: at 150,000 Pods a copy was ~9 MiB).
    slices: HashMap<String, BTreeMap<u32, Arc<AddressGroupSpec>>>,
    /// The other slices each slice 0 held lists, by key.
    listed: HashMap<String, Vec<u32>>,
    /// Pod and Node selections in use: id → key, key → id.
    keys: HashMap<u32, String>,
    ids: HashMap<String, u32>,
}

impl Published {
    /// Selection `id` starts: its members are those of the slices held.
    pub(super) fn start(&mut self, id: u32, selection: &Selection, membership: &mut Membership) {
        let key = group::key(selection);
        for member in self
            .slices
            .get(&key)
            .into_iter()
            .flat_map(|s| s.values())
            .flat_map(|s| &s.members)
        {
            membership.add(&member.ips);
        }
        self.ids.insert(key.clone(), id);
        self.keys.insert(id, key);
    }

    /// Selection `id` is no longer kept.
    pub(super) fn stop(&mut self, id: u32) {
        if let Some(key) = self.keys.remove(&id) {
            self.ids.remove(&key);
        }
    }
}

/// A group member's named ports, as the directory keeps them.
fn ports(member: &GroupMember) -> PortsAt {
    let named: Vec<NamedPort> = member
        .named_ports
        .iter()
        .map(|p| (p.name.clone(), p.protocol, p.port))
        .collect();
    (!named.is_empty()).then(|| (member.ips.to_vec(), named))
}

impl Selections {
    /// The inventory of `snapshot` (the local Node's Pods and Node, every
    /// Namespace and ExternalEntity) seen from `local`, in controller mode:
    /// Pod and Node selections read the slices given to
    /// [`Selections::set_slice`]; a Node of `snapshot` other than the
    /// local one is not read.
    pub fn controller(snapshot: &Snapshot, local: &LocalNode) -> Selections {
        Selections::with(snapshot, local, Some(Published::default()))
    }

    /// Puts slice `slice` of the selection keyed `key` in place (`None`
    /// removes it); whether a selection in use changed (its members or
    /// whether it is complete). The named ports of every slice held are
    /// kept, in use or not. Ignored in watch mode.
    pub fn set_slice(
        &mut self,
        key: &str,
        slice: u32,
        spec: Option<&Arc<AddressGroupSpec>>,
    ) -> bool {
        let Some(published) = self.published.as_mut() else {
            return false;
        };
        let held = published
            .slices
            .get_mut(key)
            .and_then(|s| s.get_mut(&slice));
        // Compared first: most slices handed again are
        // the ones held (the same, or equal).
        let same = match (held, spec) {
            (Some(held), Some(spec)) => {
                let same = Arc::ptr_eq(held, spec)
                    || (held.members == spec.members && (slice != 0 || held.slices == spec.slices));
                if same {
                    // Equal but handed anew (a list after the watch
                    // started again): hold the new one, or both would
                    // stay alive.
                    *held = Arc::clone(spec);
                }
                same
            }
            (held, spec) => held.is_none() && spec.is_none(),
        };
        if same {
            return false;
        }
        if slice == 0 {
            match spec {
                Some(spec) => published
                    .listed
                    .insert(key.to_string(), spec.slices.clone()),
                None => published.listed.remove(key),
            };
        }
        let old = match spec {
            Some(spec) => published
                .slices
                .entry(key.to_string())
                .or_default()
                .insert(slice, Arc::clone(spec)),
            None => {
                let slices = published.slices.get_mut(key).expect("held");
                let old = slices.remove(&slice);
                if slices.is_empty() {
                    published.slices.remove(key);
                }
                old
            }
        };
        fn members(spec: Option<&Arc<AddressGroupSpec>>) -> &[GroupMember] {
            spec.map_or(&[], |s| &s.members)
        }
        let (old, new) = (members(old.as_ref()), members(spec));
        // Named ports follow every slice held, in use or not.
        let holder = format!("~{key}");
        for index in 0..old.len().max(new.len()) {
            let place = (holder.clone(), format!("{slice}/{index}"));
            self.ports_moved(
                &place,
                old.get(index).and_then(ports),
                new.get(index).and_then(ports),
            );
        }
        let published = self.published.as_ref().expect("controller mode");
        let Some(&id) = published.ids.get(key) else {
            return false;
        };
        self.revision += 1;
        let membership = self.memberships[id as usize]
            .as_mut()
            .expect("a key in use names a membership");
        for member in old {
            membership.remove(&member.ips);
        }
        for member in new {
            membership.add(&member.ips);
        }
        true
    }

    /// Every slice held, by key.
    pub fn slices(&self) -> impl Iterator<Item = (&str, u32)> {
        self.published
            .iter()
            .flat_map(|p| p.slices.iter())
            .flat_map(|(key, slices)| slices.keys().map(move |s| (key.as_str(), *s)))
    }

    /// The keys of the Pod and Node selections in use, each with its
    /// selection: the groups this inventory needs (none in watch mode).
    pub fn needed(&self) -> BTreeMap<String, Selection> {
        let Some(published) = &self.published else {
            return BTreeMap::new();
        };
        published
            .ids
            .iter()
            .filter_map(|(key, &id)| {
                let membership = self.memberships[id as usize].as_ref()?;
                Some((key.clone(), membership.selection.clone()))
            })
            .collect()
    }

    /// The keys of the selections in use whose slice 0, or a slice it
    /// lists, was not received: their sets are not complete.
    pub fn waiting(&self) -> BTreeSet<String> {
        let Some(published) = &self.published else {
            return BTreeSet::new();
        };
        published
            .ids
            .keys()
            .filter(|key| {
                let held = published.slices.get(*key);
                let complete = held.is_some_and(|held| {
                    held.contains_key(&0)
                        && published
                            .listed
                            .get(*key)
                            .is_none_or(|listed| listed.iter().all(|n| held.contains_key(n)))
                });
                !complete
            })
            .cloned()
            .collect()
    }
}
