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

/// The incremental compiler and the ruleset it last built.
#[derive(Default)]
pub(super) struct Compiler {
    state: Option<(Incremental, Option<Arc<Ruleset>>)>,
    /// Controller mode: the groups shared with the source, and those the
    /// last ruleset was built from.
    peers: Option<(PeerGroups, Arc<Slices>)>,
}

impl Compiler {
    /// The compiler of an agent in controller mode.
    pub(super) fn controller(peers: PeerGroups) -> Compiler {
        Compiler {
            state: None,
            peers: Some((peers, Arc::default())),
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
    ) -> Option<Ruleset> {
        let (incremental, last) = match &mut self.state {
            Some((incremental, last)) => {
                let update = incremental.update(snapshot, node);
                let held = self.peers.as_ref().map(|(peers, _)| peers.held());
                let update = match &held {
                    Some(held) => update.max(incremental.set_groups(held.values().map(|s| &**s))),
                    None => update,
                };
                let built = incremental.ruleset();
                let counter = match (&built, update) {
                    (None, _) => &counters.compiles_unchanged,
                    (Some(_), Update::Peers) => &counters.compiles_patched,
                    (Some(_), Update::Rules | Update::Unchanged) => &counters.compiles_assembled,
                };
                if built.is_some() {
                    if let (Some((_, used)), Some(held)) = (&mut self.peers, held) {
                        *used = held;
                    }
                }
                counter.fetch_add(1, Ordering::Relaxed);
                if let Some(built) = built {
                    *last = Some(built);
                }
                (&*incremental, &*last)
            }
            None => {
                let mut incremental = match &mut self.peers {
                    Some((peers, used)) => {
                        let mut incremental = Incremental::controller(snapshot, node);
                        *used = peers.held();
                        incremental.set_groups(used.values().map(|s| &**s));
                        incremental
                    }
                    None => Incremental::new(snapshot, node),
                };
                let first = incremental.ruleset();
                if first.is_some() {
                    counters.compiles_assembled.fetch_add(1, Ordering::Relaxed);
                }
                let (incremental, last) = self.state.insert((incremental, first));
                (&*incremental, &*last)
            }
        };
        if let Some((peers, _)) = &self.peers {
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
        last.as_deref().cloned()
    }

    /// Controller mode: the AddressGroup slices the last ruleset was built
    /// from (its verdict cache generation covers them).
    pub(super) fn groups(&self) -> Option<&Slices> {
        self.peers.as_ref().map(|(_, used)| &**used)
    }
}
