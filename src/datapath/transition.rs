//! How the datapath moves from one ruleset to the next so that a write
//! failing at any point leaves traffic under the previous ruleset or the
//! next one, never under a mix that neither would allow. Pure: it plans
//! states and orders writes; [`super::kernel`] runs them.
//!
//! # What enforces what
//!
//! The kernel decides *which* new connections a worker sees (the
//! `tollgate-endpoints-*` sets and, without enforcing, the
//! `tollgate-dryrun-*` sets, the whole-hook NFQUEUE rules of node
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
//! Each reconcile runs its writes in the order of [`steps`]: (1) the set
//! writes that create sets and change the members of existing ones by
//! difference, each set's additions before its deletions (never a refill:
//! a change of one member is one `add` or `del`),
//! (2) `iptables-restore`, (3) `ip6tables-restore` (each one atomic
//! transaction for its table), (4) the set writes that destroy sets no
//! rule refers to any more (the tables stopped referring to them in steps
//! 2–3; destroying a set a rule uses would fail anyway). The set writes
//! are netlink requests ([`super::ipset_netlink`]), run in order, each
//! answered before the next; the first the kernel refuses ends the write,
//! as `ipset restore` stops at its first failing line.
//!
//! Why any single failure is safe: while widening, every state the kernel
//! can be in after a prefix of the steps (sets swapped or not, either
//! table old or bridge) queues at least what A needs, and A is in force;
//! while narrowing, every such state queues at least what B needs, and B is
//! in force. A set write stops at its first refused command, so step 1
//! leaves a prefix of its additions and deletions: while widening the
//! sets only gain (the bridge is a union) or lose members neither ruleset
//! has, while narrowing they lose only what the new ruleset does not need,
//! after gaining what it does (the verdict cache's lookup sets lose the
//! current generation's sets before they gain the next one's: a cache that
//! answers less only sends more to the workers); steps 2–3 are
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

use std::collections::BTreeMap;
use std::fmt;

use crate::fqdn::FqdnPattern;
use crate::model::PortProtocol;
use crate::ruleset::{Enforced, VerdictCache};

use super::cache::generation_of_set;
use super::diff::Changes;
use super::plan::{cache_sets, dry_run_set, endpoints_set, published_port, unknown_set, Hook};
use super::state::{CacheSet, Family, State};

/// One write of an apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Set writes (netlink): create sets and change their members.
    PrepareSets,
    /// `iptables-restore` or `ip6tables-restore` (raw, then filter).
    Table(Family),
    /// `ebtables-restore`: anti-spoofing on bridge ports.
    Bridge,
    /// Set writes (netlink): destroy sets nothing refers to any more.
    DestroySets,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::PrepareSets => f.write_str("ipset (create and change sets)"),
            Step::Table(family) => write!(f, "{}-restore", family.command()),
            Step::Bridge => f.write_str("ebtables-restore"),
            Step::DestroySets => f.write_str("ipset (destroy stale sets)"),
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
        || !changes.ranges.is_empty()
        || !changes.sources.is_empty()
        || !changes.create_learned.is_empty()
        || !changes.create_cache.is_empty()
        || !changes.cache_lists.is_empty()
    {
        out.push(Step::PrepareSets);
    }
    for family in Family::ALL {
        if !changes.table(family).is_empty()
            || !changes.raw(family).is_empty()
            || !changes.mangle(family).is_empty()
        {
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

/// The state that queues everything `from` and `to` need: the planned
/// state of a ruleset whose enforced endpoints, dry-run endpoints,
/// published ports, node hooks and FQDN selectors are the union of both
/// (an endpoint promoted from dry-run to enforced, or back, is in both
/// sets, where the enforced set's rules, first, queue it under the fail
/// mode), and whose unknown
/// addresses are those unknown to either (closed while either ruleset
/// does not know them). `plan` is [`super::plan::desired`] with the
/// configuration bound.
pub fn bridge(
    plan: impl Fn(&Enforced, &[FqdnPattern]) -> State,
    from: (&Enforced, &[FqdnPattern]),
    to: (&Enforced, &[FqdnPattern]),
    next_cache: NextCache,
) -> State {
    let (a, b) = (from.0, to.0);
    let mut ranges = a.ranges.clone();
    ranges.extend(b.ranges.iter().filter(|r| !a.ranges.contains(r)));
    // Known in the bridge: an address neither ruleset calls unknown.
    let mut known: Vec<_> = a
        .known
        .iter()
        .chain(&b.known)
        .filter(|ip| !a.is_unknown(**ip) && !b.is_unknown(**ip))
        .copied()
        .collect();
    known.sort();
    known.dedup();
    let enforced = Enforced {
        node_ingress: a.node_ingress || b.node_ingress,
        node_egress: a.node_egress || b.node_egress,
        endpoints: union(&a.endpoints, &b.endpoints),
        dry_run_endpoints: union(&a.dry_run_endpoints, &b.dry_run_endpoints),
        verdict_cache: bridged_cache(a.verdict_cache, b.verdict_cache, next_cache),
        ranges,
        known,
        published: union(&a.published, &b.published),
        dry_run_published: union(&a.dry_run_published, &b.dry_run_published),
    };
    plan(&enforced, &union(from.1, to.1))
}

/// Whether the verdict cache sets of the next ruleset's generation were
/// created before the bridge is written (an `ipset` write of their own,
/// [`next_cache_sets`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextCache {
    /// They exist: the bridge answers from them.
    Ready,
    /// They do not (that write failed, or was not tried): they are created
    /// when the kernel narrows.
    Deferred,
}

/// The verdict cache while the kernel bridges two rulesets. Of one
/// generation (the same inputs), it stays as it is. Otherwise nothing is
/// answered from the current one's sets once the bridge is installed, so
/// no verdict of the current ruleset outlives the switch:
/// - with the next one's sets [`NextCache::Ready`], the bridge answers
///   from them: its set writes, which run before its tables, take the
///   current one's sets out of the lookup sets and put the next one's in
///   (no rule changes). They hold only verdicts of their own generation
///   (a worker adds an entry only to the sets of the generation that
///   decided it): none until the next ruleset decides, and then its own.
///   The narrowing has nothing of the cache left to write.
/// - [`NextCache::Deferred`]: the bridge removes the lookup rules (the
///   same `iptables-restore` that widens) and leaves every set of the
///   cache, lookup sets included, as it is; the next one's are created and
///   put in the lookup sets when the kernel narrows. The bridge needs no
///   set written for the cache, so a failing `ipset` delays only what
///   needs it: a change that needs no set, such as closing a port, still
///   goes into force (`faults::failing_ipset_keeps_previous_membership`).
fn bridged_cache(
    from: Option<VerdictCache>,
    to: Option<VerdictCache>,
    next_cache: NextCache,
) -> Option<VerdictCache> {
    match (from, to) {
        (Some(from), Some(to)) if from.generation == to.generation => Some(to),
        (_, Some(to)) if next_cache == NextCache::Ready => Some(to),
        (Some(from), _) => Some(VerdictCache {
            lookup: false,
            ..from
        }),
        (None, _) => None,
    }
}

/// The verdict cache sets of `to`'s generation that `installed` lacks,
/// when `to` caches under another generation than `from`: what is written
/// (alone) before the bridge so that it can be [`NextCache::Ready`].
pub fn next_cache_sets(
    from: &Enforced,
    to: &Enforced,
    installed: &State,
) -> BTreeMap<String, CacheSet> {
    match (from.verdict_cache, to.verdict_cache) {
        (Some(from), Some(to)) if from.generation == to.generation => BTreeMap::new(),
        (_, Some(to)) => cache_sets(&to)
            .filter(|(name, _)| !installed.cache.contains_key(name))
            .collect(),
        (_, None) => BTreeMap::new(),
    }
}

/// The verdict cache an installed state answers from: the generation of
/// the sets its lookup sets hold, with the bounds of those sets.
fn installed_cache(installed: &State) -> Option<VerdictCache> {
    let name = installed.cache_lists.values().flatten().next()?;
    let set = installed.cache.get(name)?;
    Some(VerdictCache {
        generation: generation_of_set(name)?,
        timeout_secs: set.timeout_secs,
        max_entries: set.max_entries,
        lookup: true,
    })
}

/// What an installed state enforces, as far as the kernel says: the
/// members of the endpoint sets and of the dry-run sets, the ranges and exceptions of the unknown
/// sets, the published ports the INPUT chains queue, and node ingress
/// (egress) when an owned INPUT (OUTPUT) chain of either family queues
/// every new connection. The state a starting agent adopts ([`bridge`]
/// from it).
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
                            && published_port(rule).is_none()
                    })
                })
        })
    };
    let members = |set: fn(Family) -> &'static str| {
        Family::ALL
            .iter()
            .filter_map(|family| installed.sets.get(set(*family)))
            .flat_map(|set| set.members.iter().copied())
            .collect()
    };
    let unknown = Family::ALL
        .iter()
        .filter_map(|family| installed.ranges.get(&unknown_set(*family)));
    let (mut ranges, mut known) = (Vec::new(), Vec::new());
    for set in unknown {
        ranges.extend(set.ranges.iter().copied());
        known.extend(set.except.iter().copied());
    }
    let (published, dry_run_published) = installed_published(installed);
    Enforced {
        node_ingress: whole_hook(Hook::Input),
        node_egress: whole_hook(Hook::Output),
        endpoints: members(endpoints_set),
        dry_run_endpoints: members(dry_run_set),
        verdict_cache: installed_cache(installed),
        ranges,
        known,
        published,
        dry_run_published,
    }
}

/// Published ports: (protocol, Node port).
type Ports = Vec<(PortProtocol, u16)>;

/// The published ports the installed INPUT chains queue
/// ([`super::plan`]'s `published_rule`): those of enforced endpoints, then
/// those of dry-run ones (below the dry-run set's rules; a port queued
/// both ways counts as enforced).
fn installed_published(installed: &State) -> (Ports, Ports) {
    let (mut enforced, mut dry_run) = (Vec::new(), Vec::new());
    for family in Family::ALL {
        let Some(rules) = installed.table(family).chains.get(Hook::Input.chain()) else {
            continue;
        };
        let mut below_dry_run = false;
        for rule in rules {
            below_dry_run |= rule.contains(dry_run_set(family));
            if let Some(port) = published_port(rule) {
                let out = if below_dry_run {
                    &mut dry_run
                } else {
                    &mut enforced
                };
                if !out.contains(&port) {
                    out.push(port);
                }
            }
        }
    }
    dry_run.retain(|port| !enforced.contains(port));
    (enforced, dry_run)
}

/// Whether `installed` holds anything tollgate owns.
pub fn owns_anything(installed: &State) -> bool {
    !(installed.v4.owns_nothing()
        && installed.v6.owns_nothing()
        && installed.raw_v4.owns_nothing()
        && installed.raw_v6.owns_nothing()
        && installed.mangle_v4.owns_nothing()
        && installed.mangle_v6.owns_nothing()
        && installed.ranges.is_empty()
        && installed.sources.is_empty()
        && installed.bridge.owns_nothing()
        && installed.sets.is_empty()
        && installed.learned.is_empty())
}

/// `a` then the items of `b` that `a` lacks.
pub fn union<T: Clone + PartialEq>(a: &[T], b: &[T]) -> Vec<T> {
    let mut out = a.to_vec();
    for item in b {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests;
