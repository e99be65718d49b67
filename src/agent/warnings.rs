//! The agent's side of "no silent mistakes": on the first snapshot and
//! every reload, what the policies probably do not mean
//! ([`crate::validate::intent`]: no policies, a label key no object
//! carries, a policy that applies nowhere, rules in no defined order) is
//! logged as `policy warning:` lines with file, object and field, counted
//! in the `policy_warnings` gauge and listed in the status with the
//! admission warnings. It judges nothing itself and refuses nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::compile::LocalNode;
use crate::model::Snapshot;
use crate::ruleset::Ruleset;
use crate::status::AgentStatus;
use crate::validate::{review, Checker, Inventory, Whole};

use super::AgentCounters;

pub(super) struct Warnings {
    /// What problems about the whole source name: the policy directory,
    /// or `kubernetes`.
    origin: PathBuf,
    /// What of the Pods and Nodes the snapshots hold (the local Node's
    /// only in controller mode).
    inventory: Inventory,
    /// Log every warning at every reload (a policy directory: a reload is
    /// an edit or SIGHUP); else only warnings not logged at the last one
    /// (an API source reloads at every Pod or container change).
    every_reload: bool,
    /// The warnings of the last reload.
    last: BTreeSet<String>,
    /// The snapshot and Node they were found for: from an API source, a
    /// reload of the same ones (an agent in controller mode, for its
    /// groups: a ruleset only patched with peers' addresses) would find
    /// the same, and is skipped.
    judged: Option<(Arc<Snapshot>, LocalNode)>,
    /// Validation kept between reloads (the objects a Kubernetes source's
    /// snapshots share are not checked again).
    checker: Checker,
}

impl Warnings {
    pub(super) fn new(origin: PathBuf, inventory: Inventory, every_reload: bool) -> Warnings {
        Warnings {
            origin,
            inventory,
            every_reload,
            last: BTreeSet::new(),
            judged: None,
            checker: Checker::new(true),
        }
    }

    /// `snapshot`, compiled as `ruleset` for `node`, is about to be put in
    /// force: logs its warnings and publishes them with the admission
    /// warnings (which the source logs itself).
    pub(super) fn reloaded(
        &mut self,
        snapshot: &Arc<Snapshot>,
        node: &LocalNode,
        ruleset: &Ruleset,
        counters: &AgentCounters,
        status: &AgentStatus,
    ) {
        let same = |(s, n): &(Arc<Snapshot>, LocalNode)| Arc::ptr_eq(s, snapshot) && n == node;
        if !self.every_reload && self.judged.as_ref().is_some_and(same) {
            return;
        }
        self.judged = Some((Arc::clone(snapshot), node.clone()));
        let whole = Whole::Source {
            origin: &self.origin,
            inventory: self.inventory,
        };
        let (admitted, found) = review(&mut self.checker, snapshot, whole, &[(node, ruleset)]);
        let found: Vec<String> = found.iter().map(ToString::to_string).collect();
        for warning in &found {
            if self.every_reload || !self.last.contains(warning) {
                tracing::warn!("policy warning: {warning}");
            }
        }
        self.last = found.iter().cloned().collect();
        let mut listed: Vec<String> = admitted.iter().map(ToString::to_string).collect();
        listed.extend(found);
        counters
            .policy_warnings
            .store(listed.len() as u64, Ordering::Relaxed);
        status.policy_warnings(listed);
    }
}
