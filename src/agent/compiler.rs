//! The agent's compiler: one [`Incremental`] kept across reloads, fed
//! each snapshot the source hands, so that a change recompiles only what
//! it touches (see [`crate::compile::Incremental`]) and the ruleset a
//! change leaves alone is the last one. Counts how each ruleset was made
//! (`tollgate_compiles_total{how}`). Never touches the kernel.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::compile::{Incremental, LocalNode, Update};
use crate::model::Snapshot;
use crate::ruleset::Ruleset;

use super::counters::AgentCounters;

/// The incremental compiler and the ruleset it last built.
#[derive(Default)]
pub(super) struct Compiler {
    state: Option<(Incremental, Arc<Ruleset>)>,
}

impl Compiler {
    /// The ruleset of `snapshot` for `node`: the last one when nothing it
    /// reads changed, the last one patched when only remote members did,
    /// assembled again otherwise.
    pub(super) fn compile(
        &mut self,
        snapshot: &Arc<Snapshot>,
        node: &LocalNode,
        counters: &AgentCounters,
    ) -> Ruleset {
        let (update, incremental, last) = match &mut self.state {
            Some((incremental, last)) => (incremental.update(snapshot, node), incremental, last),
            None => {
                let mut incremental = Incremental::new(snapshot, node);
                let first = incremental.ruleset().expect("a new compiler builds");
                counters.compiles_assembled.fetch_add(1, Ordering::Relaxed);
                let (_, last) = self.state.insert((incremental, first));
                return Ruleset::clone(last);
            }
        };
        let counter = match incremental.ruleset() {
            None => &counters.compiles_unchanged,
            Some(built) => {
                *last = built;
                match update {
                    Update::Peers => &counters.compiles_patched,
                    Update::Rules | Update::Unchanged => &counters.compiles_assembled,
                }
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ruleset::clone(last)
    }
}
