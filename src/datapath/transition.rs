//! How the datapath moves from one ruleset to the next so that a write
//! failing at any point leaves traffic under the previous ruleset or the
//! next one, never under a mix that neither would allow. Pure: it plans
//! states and orders writes; [`super::kernel`] runs them.
//!
//! # What enforces what
//!
//! The kernel decides *which* new connections a worker sees (the
//! `tollgate-endpoints-*` sets, the whole-hook NFQUEUE rules of node
//! ingress/egress, the DNS rules of FQDN selectors); the ruleset in the
//! workers decides *what happens* to them. A connection the kernel does not
//! queue falls off the owned chains and is accepted, so the danger is a
//! kernel that queues less than the ruleset in force needs. Queuing more
//! is harmless: a worker decides the extra connections by the ruleset in
//! force (those no policy applies to are allowed, as unqueued ones would
//! be).
//!
//! # The order of a change from ruleset A to ruleset B
//!
//! 1. **Widen**: reconcile the kernel to the [`bridge`] of A and B, which
//!    queues everything either ruleset needs (endpoint sets = A ∪ B,
//!    whole-hook queuing and DNS snooping if A or B has them, the FQDN
//!    sets of both). The ruleset in force is still A.
//! 2. **Switch**: only when the bridge is fully installed, B becomes the
//!    ruleset in force (the workers see it on their next packet).
//! 3. **Narrow**: reconcile the kernel to B's own state (drops what only A
//!    needed, destroys A's stale FQDN sets).
//!
//! Each reconcile runs its writes in the order of [`steps`]: (1) one
//! `ipset restore` that creates sets and changes the members of existing
//! ones by difference, each set's additions before its deletions (never a
//! refill: a change of one member is one `add` or `del`),
//! (2) `iptables-restore`, (3) `ip6tables-restore` (each one atomic
//! transaction for its table), (4) one `ipset restore` that destroys sets
//! no rule refers to any more (the tables stopped referring to them in
//! steps 2–3; destroying a set a rule uses would fail anyway).
//!
//! Why any single failure is safe: while widening, every state the kernel
//! can be in after a prefix of the steps (sets swapped or not, either
//! table old or bridge) queues at least what A needs, and A is in force;
//! while narrowing, every such state queues at least what B needs, and B is
//! in force. `ipset restore` stops at its first failing line, so step 1
//! leaves a prefix of its additions and deletions: while widening the
//! sets only gain (the bridge is a union) or lose members neither ruleset
//! has, while narrowing they lose only what the new ruleset does not need,
//! after gaining what it does; steps 2–3 are
//! all-or-nothing per table; step 4 only removes unreferenced sets. The
//! failed reconcile is then retried from scratch ([`super::retry`]): it
//! reads the kernel again and diffs, so whatever part did land is not
//! written twice.
//!
//! # Adopting what an earlier agent left
//!
//! A stopped or killed agent leaves its state in the kernel. A starting
//! agent keeps it untouched (its queues have no reader, so the fail mode
//! decides what it queues) until the source has a complete snapshot B;
//! then the workers decide by B and the kernel moves from what it holds
//! to B exactly as from a ruleset A to B, where A is what the installed
//! state enforces ([`adopted`]: the members of the endpoint sets and the
//! whole-hook node rules). The bridge queues A ∪ B, so a connection
//! both the earlier agent's ruleset and B deny is queued in every
//! intermediate state and denied by B.

use std::fmt;

use crate::fqdn::FqdnPattern;
use crate::ruleset::{Enforced, VerdictCache};

use super::cache::CACHE_SET_PREFIX;
use super::diff::Changes;
use super::plan::{endpoints_set, Hook};
use super::state::{Family, State};

/// One write of an apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `ipset restore`: create sets and change their members.
    PrepareSets,
    /// `iptables-restore` or `ip6tables-restore` (raw, then filter).
    Table(Family),
    /// `ebtables-restore`: anti-spoofing on bridge ports.
    Bridge,
    /// `ipset restore`: destroy sets nothing refers to any more.
    DestroySets,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::PrepareSets => f.write_str("ipset restore (create and change sets)"),
            Step::Table(family) => write!(f, "{}-restore", family.command()),
            Step::Bridge => f.write_str("ebtables-restore"),
            Step::DestroySets => f.write_str("ipset restore (destroy stale sets)"),
        }
    }
}

impl Step {
    /// A short name for metric labels.
    pub fn label(self) -> &'static str {
        match self {
            Step::PrepareSets => "ipset_prepare",
            Step::Table(Family::V4) => "iptables",
            Step::Table(Family::V6) => "ip6tables",
            Step::Bridge => "ebtables",
            Step::DestroySets => "ipset_cleanup",
        }
    }
}

/// The writes of `changes`, in the order they must run; steps with
/// nothing to write are left out.
pub fn steps(changes: &Changes) -> Vec<Step> {
    let mut out = Vec::new();
    if !changes.sets.is_empty()
        || !changes.create_learned.is_empty()
        || !changes.create_cache.is_empty()
    {
        out.push(Step::PrepareSets);
    }
    for family in Family::ALL {
        if !changes.table(family).is_empty() || !changes.raw(family).is_empty() {
            out.push(Step::Table(family));
        }
    }
    if !changes.bridge.is_empty() {
        out.push(Step::Bridge);
    }
    if !changes.destroy_sets.is_empty() {
        out.push(Step::DestroySets);
    }
    out
}

/// The input of one write of `changes` (`ipset restore` or
/// `ip6?tables-restore` text), or `None` when the step has nothing to do.
pub fn input(changes: &Changes, step: Step) -> Option<String> {
    match step {
        Step::PrepareSets => changes.ipset_prepare_text(),
        Step::Table(family) => changes.iptables_restore_text(family),
        Step::Bridge => changes
            .bridge
            .restore_text_in(super::state::TableKind::BridgeNat),
        Step::DestroySets => changes.ipset_cleanup_text(),
    }
}

/// The state that queues everything `from` and `to` need: the planned
/// state of a ruleset whose enforced endpoints, node hooks and FQDN
/// selectors are the union of both. `plan` is [`super::plan::desired`]
/// with the configuration bound.
pub fn bridge(
    plan: impl Fn(&Enforced, &[FqdnPattern]) -> State,
    from: (&Enforced, &[FqdnPattern]),
    to: (&Enforced, &[FqdnPattern]),
) -> State {
    let mut endpoints = from.0.endpoints.clone();
    for address in &to.0.endpoints {
        if !endpoints.contains(address) {
            endpoints.push(*address);
        }
    }
    let enforced = Enforced {
        node_ingress: from.0.node_ingress || to.0.node_ingress,
        node_egress: from.0.node_egress || to.0.node_egress,
        endpoints,
        verdict_cache: bridged_cache(from.0.verdict_cache, to.0.verdict_cache),
    };
    plan(&enforced, &union(from.1, to.1))
}

/// The verdict cache while the kernel bridges two rulesets. Of one
/// generation (the same inputs), it stays as it is. Otherwise the current
/// one's sets stay but nothing is answered from them from the moment the
/// bridge is installed (the same `iptables-restore` that widens), so no
/// verdict of the current ruleset outlives the switch; the next one's sets
/// are created when the kernel narrows to it. A bridge needs no set
/// written for the cache, so a failing `ipset` delays only what needs it.
fn bridged_cache(from: Option<VerdictCache>, to: Option<VerdictCache>) -> Option<VerdictCache> {
    match (from, to) {
        (Some(from), Some(to)) if from.generation == to.generation => Some(to),
        (Some(from), _) => Some(VerdictCache {
            lookup: false,
            ..from
        }),
        (None, _) => None,
    }
}

/// The verdict cache an installed state answers from: the generation the
/// owned chains' cache rules name, with the bounds of its sets.
fn installed_cache(installed: &State) -> Option<VerdictCache> {
    let name = installed
        .v4
        .chains
        .values()
        .chain(installed.v6.chains.values())
        .flatten()
        .find_map(|rule| {
            rule.split(' ')
                .find(|word| word.starts_with(CACHE_SET_PREFIX))
        })?;
    let set = installed.cache.get(name)?;
    let hex = name.strip_prefix(CACHE_SET_PREFIX)?.split('-').next()?;
    Some(VerdictCache {
        generation: u64::from_str_radix(hex, 16).ok()?,
        timeout_secs: set.timeout_secs,
        max_entries: set.max_entries,
        lookup: true,
    })
}

/// What an installed state enforces, as far as the kernel says: the
/// members of the endpoint sets, and node ingress (egress) when an owned
/// INPUT (OUTPUT) chain of either family queues every new connection.
/// The state a starting agent adopts ([`bridge`] from it).
pub fn adopted(installed: &State) -> Enforced {
    let whole_hook = |hook: Hook| {
        Family::ALL.iter().any(|family| {
            installed
                .table(*family)
                .chains
                .get(hook.chain())
                .is_some_and(|rules| {
                    rules.iter().any(|rule| {
                        rule.contains("--ctstate NEW")
                            && rule.contains("-j NFQUEUE")
                            && !rule.contains("--match-set")
                    })
                })
        })
    };
    let endpoints = Family::ALL
        .iter()
        .filter_map(|family| installed.sets.get(endpoints_set(*family)))
        .flat_map(|set| set.members.iter().copied())
        .collect();
    Enforced {
        node_ingress: whole_hook(Hook::Input),
        node_egress: whole_hook(Hook::Output),
        endpoints,
        verdict_cache: installed_cache(installed),
    }
}

/// Whether `installed` holds anything tollgate owns.
pub fn owns_anything(installed: &State) -> bool {
    !(installed.v4.owns_nothing()
        && installed.v6.owns_nothing()
        && installed.raw_v4.owns_nothing()
        && installed.raw_v6.owns_nothing()
        && installed.bridge.owns_nothing()
        && installed.sets.is_empty()
        && installed.learned.is_empty())
}

/// `a` then the patterns of `b` that `a` lacks.
pub fn union(a: &[FqdnPattern], b: &[FqdnPattern]) -> Vec<FqdnPattern> {
    let mut out = a.to_vec();
    for pattern in b {
        if !out.contains(pattern) {
            out.push(pattern.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests;
