//! The agent's compiler: one [`Incremental`] kept across reloads, fed
//! each snapshot the source hands, so that a change recompiles only what
//! it touches (see [`crate::compile::Incremental`]) and the ruleset a
//! change leaves alone is the last one. In controller mode
//! (`kubernetes.peers: controller`) it also feeds the AddressGroup slices
//! received and tells the source which groups the rules need; while one
//! of them is missing it builds no ruleset and the one in force stays.
//! Counts how each ruleset was made (`tollgate_compiles_total{how}`).
//! Never touches the kernel.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::compile::{Incremental, LocalNode, Update};
use crate::model::Snapshot;
use crate::ruleset::Ruleset;
use crate::selection::group::Slices;
use crate::source::kube::PeerGroups;

use super::counters::AgentCounters;

/// What [`Compiler::compile`] hands the agent.
pub(super) struct Compiled {
    pub ruleset: Ruleset,
    /// Built for this snapshot. `false`: nothing any rule, set or
    /// endpoint reads changed since the last one, so this is the last
    /// ruleset (the incremental compiler's property test: it equals the
    /// full compile of the new snapshot), and every decision stays.
    pub new: bool,
}

/// The incremental compiler and the ruleset it last built.
#[derive(Default)]
pub(super) struct Compiler {
    state: Option<(Incremental, Option<Arc<Ruleset>>)>,
    /// Controller mode: the groups shared with the source.
    peers: Option<Peers>,
}

/// Controller mode: the groups shared with the source, those last handed
/// to the compiler, and those the last ruleset was built from.
struct Peers {
    groups: PeerGroups,
    handed: Arc<Slices>,
    used: Arc<Slices>,
}

impl Peers {
    /// The groups held now, handed to `incremental` by difference from
    /// those handed last: the source shares every object it has not
    /// replaced, so an unchanged one is the same `Arc`.
    fn hand(&mut self, incremental: &mut Incremental) -> (Update, Arc<Slices>) {
        let held = self.groups.held();
        let last = &self.handed;
        let gone = last
            .iter()
            .filter(|(name, _)| !held.contains_key(*name))
            .map(|(_, was)| (Some(was), None));
        let changed = held.iter().filter_map(|(name, is)| match last.get(name) {
            Some(was) if Arc::ptr_eq(was, is) => None,
            was => Some((was, Some(is))),
        });
        let update = incremental.patch_groups(gone.chain(changed));
        self.handed = Arc::clone(&held);
        (update, held)
    }
}

impl Compiler {
    /// The compiler of an agent in controller mode.
    pub(super) fn controller(peers: PeerGroups) -> Compiler {
        Compiler {
            state: None,
            peers: Some(Peers {
                groups: peers,
                handed: Arc::default(),
                used: Arc::default(),
            }),
        }
    }

    /// The ruleset of `snapshot` for `node`: the last one when nothing it
    /// reads changed, the last one patched when only remote members did,
    /// assembled again otherwise. `None` in controller mode while a group
    /// the rules use has not been received: the ruleset in force stays.
    pub(super) fn compile(
        &mut self,
        snapshot: &Arc<Snapshot>,
        node: &LocalNode,
        counters: &AgentCounters,
    ) -> Option<Compiled> {
        let (incremental, last, new) = match &mut self.state {
            Some((incremental, last)) => {
                let mut update = incremental.update(snapshot, node);
                let held = self.peers.as_mut().map(|peers| {
                    let (groups, held) = peers.hand(incremental);
                    update = update.max(groups);
                    held
                });
                let built = incremental.ruleset();
                let counter = match (&built, update) {
                    (None, _) => &counters.compiles_unchanged,
                    (Some(_), Update::Peers) => &counters.compiles_patched,
                    (Some(_), Update::Rules | Update::Unchanged) => &counters.compiles_assembled,
                };
                if built.is_some() {
                    if let (Some(peers), Some(held)) = (&mut self.peers, held) {
                        peers.used = held;
                    }
                }
                counter.fetch_add(1, Ordering::Relaxed);
                let new = built.is_some();
                if let Some(built) = built {
                    *last = Some(built);
                }
                (&*incremental, &*last, new)
            }
            None => {
                let mut incremental = match &mut self.peers {
                    Some(peers) => {
                        let mut incremental = Incremental::controller(snapshot, node);
                        peers.used = peers.hand(&mut incremental).1;
                        incremental
                    }
                    None => Incremental::new(snapshot, node),
                };
                let first = incremental.ruleset();
                if first.is_some() {
                    counters.compiles_assembled.fetch_add(1, Ordering::Relaxed);
                }
                let (incremental, last) = self.state.insert((incremental, first));
                (&*incremental, &*last, true)
            }
        };
        if let Some(Peers { groups: peers, .. }) = &self.peers {
            let waiting = incremental.waiting();
            peers.compiled(incremental.needed().into_keys().collect(), waiting.len());
            if !waiting.is_empty() {
                tracing::info!(
                    waiting = waiting.len(),
                    "peers: waiting for groups; the ruleset in force stays"
                );
                return None;
            }
        }
        last.as_deref()
            .cloned()
            .map(|ruleset| Compiled { ruleset, new })
    }

    /// Controller mode: the AddressGroup slices the last ruleset was built
    /// from (its verdict cache generation covers them).
    pub(super) fn groups(&self) -> Option<&Slices> {
        self.peers.as_ref().map(|peers| &*peers.used)
    }
}
