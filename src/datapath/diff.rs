//! What must change to turn the installed [`State`] into the desired one,
//! rendered as input for `iptables-restore --noflush` and as the set
//! writes of [`super::ipset_netlink`] (each an `ipset restore -exist`
//! line). Pure. Owned chains are rewritten whole (declaring `:CHAIN - [0:0]`
//! flushes it inside the same atomic batch); an address set changes by
//! difference (its additions before its deletions), and a range or source
//! set is refilled through a temporary set and `swap`, so it is never seen
//! half-filled.
//!
//! Jumps into `DOCKER-USER` are planned only where that chain exists
//! (tollgate never creates, flushes or reorders it, nor any rule but its
//! own jump). A jump a container runtime buried ([`Table::buried`]) is
//! deleted and inserted at the top again in the same atomic batch.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use super::ipset_netlink::{Entry, SetCommand, SetKind};
#[cfg(test)]
use super::state::LearnedSet;
use super::state::{
    CacheSet, Family, IpSet, RangeSet, SourceSet, State, Table, TableKind, DOCKER_USER,
};

/// Suffix of the temporary set a range set is refilled in.
const NEXT_SUFFIX: &str = "-next";
/// Default timeout of a learned set; every entry is written with its own.
const LEARNED_DEFAULT_TIMEOUT: u32 = 300;

/// Changes to one family's filter table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableChanges {
    /// Owned chains to (re)write with these rules.
    pub write: BTreeMap<String, Vec<String>>,
    /// Owned chains to remove.
    pub remove: Vec<String>,
    /// Jump rules to delete, one entry per occurrence.
    pub delete_jumps: Vec<(String, String)>,
    /// Jump rules to insert at position 1.
    pub insert_jumps: Vec<(String, String)>,
}

impl TableChanges {
    pub fn is_empty(&self) -> bool {
        self.write.is_empty()
            && self.remove.is_empty()
            && self.delete_jumps.is_empty()
            && self.insert_jumps.is_empty()
    }

    fn between(desired: &Table, installed: &Table) -> TableChanges {
        let wanted: Vec<&(String, String)> = wanted_jumps(desired, installed).collect();
        let write = desired
            .chains
            .iter()
            .filter(|(name, rules)| installed.chains.get(*name) != Some(rules))
            .map(|(name, rules)| (name.clone(), rules.clone()))
            .collect();
        let remove = installed
            .chains
            .keys()
            .filter(|name| !desired.chains.contains_key(*name))
            .cloned()
            .collect();
        let mut delete_jumps = Vec::new();
        for (i, jump) in installed.jumps.iter().enumerate() {
            if installed.jumps[..i].contains(jump) {
                continue;
            }
            // A buried jump is deleted and inserted at the top again.
            let moved = installed.buried.contains(jump);
            let keep = usize::from(wanted.contains(&jump) && !moved);
            let extra = installed.jumps.iter().filter(|j| *j == jump).count() - keep;
            delete_jumps.extend(std::iter::repeat_n(jump.clone(), extra));
        }
        let mut insert_jumps = Vec::new();
        for jump in wanted {
            let present = installed.jumps.contains(jump) && !installed.buried.contains(jump);
            if !present && !insert_jumps.contains(jump) {
                insert_jumps.push(jump.clone());
            }
        }
        TableChanges {
            write,
            remove,
            delete_jumps,
            insert_jumps,
        }
    }

    /// Input for `iptables-restore --noflush` (the filter table), or
    /// `None` when nothing changes.
    pub fn restore_text(&self) -> Option<String> {
        self.restore_text_in(TableKind::Filter)
    }

    /// Input for `iptables-restore --noflush` or `ebtables-restore
    /// --noflush` of table `kind`, or `None` when nothing changes.
    pub fn restore_text_in(&self, kind: TableKind) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut out = format!("*{}\n", kind.name());
        for name in self.write.keys().chain(&self.remove) {
            writeln!(out, "{}", kind.declare(name)).expect("write to String");
        }
        for (name, rules) in &self.write {
            for rule in rules {
                writeln!(out, "-A {name} {rule}").expect("write to String");
            }
        }
        for (chain, rule) in &self.delete_jumps {
            writeln!(out, "-D {chain} {rule}").expect("write to String");
        }
        for name in &self.remove {
            writeln!(out, "-X {name}").expect("write to String");
        }
        for (chain, rule) in &self.insert_jumps {
            writeln!(out, "-I {chain} 1 {rule}").expect("write to String");
        }
        out.push_str("COMMIT\n");
        Some(out)
    }
}

/// The desired content of a set and whether it exists already: a new set
/// is created with its members; an existing one gets the members it lacks
/// added, then those it must lose deleted (never refilled): every state on
/// the way holds the installed members until the deletions begin, and the
/// desired ones from then on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetWrite {
    pub set: IpSet,
    pub exists: bool,
    /// Members to add: all of them for a new set.
    pub add: Vec<IpAddr>,
    /// Members to delete (an existing set's only).
    pub remove: Vec<IpAddr>,
}

/// The desired content of a set written whole (a range set, a source
/// set) and whether it exists already (refilled through a temporary set
/// and `swap`, [`refill`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refill<S> {
    pub set: S,
    pub exists: bool,
}

/// The sets of `desired` that `installed` lacks or holds otherwise.
fn refills<S: Clone + PartialEq>(
    desired: &BTreeMap<String, S>,
    installed: &BTreeMap<String, S>,
) -> BTreeMap<String, Refill<S>> {
    desired
        .iter()
        .filter_map(|(name, set)| match installed.get(name) {
            Some(current) if current == set => None,
            current => Some((
                name.clone(),
                Refill {
                    set: set.clone(),
                    exists: current.is_some(),
                },
            )),
        })
        .collect()
}

/// The writes to one `list:set`: created when it does not exist, the sets
/// it should no longer hold taken out, then those it lacks put in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListWrite {
    pub exists: bool,
    pub add: Vec<String>,
    pub remove: Vec<String>,
}

/// Everything to change, in the order [`super::kernel`] runs it: sets are
/// created or changed first (rules may refer to them), then the tables,
/// then sets no longer referenced are destroyed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Sets to create or change, by name.
    pub sets: BTreeMap<String, SetWrite>,
    /// Range sets to create or refill, by name.
    pub ranges: BTreeMap<String, Refill<RangeSet>>,
    /// Source sets to create or refill, by name.
    pub sources: BTreeMap<String, Refill<SourceSet>>,
    /// Timeout sets to create (empty), by name. Existing ones are kept
    /// with their entries.
    pub create_learned: BTreeMap<String, Family>,
    /// Verdict cache sets to create (empty), by name.
    pub create_cache: BTreeMap<String, CacheSet>,
    /// The verdict cache's lookup sets to create or change, by name.
    pub cache_lists: BTreeMap<String, ListWrite>,
    pub v4: TableChanges,
    pub v6: TableChanges,
    /// The raw tables (anti-spoofing), written with the filter table of
    /// their family.
    pub raw_v4: TableChanges,
    pub raw_v6: TableChanges,
    /// The mangle tables (the forward hook), written with the filter
    /// table of their family, before it.
    pub mangle_v4: TableChanges,
    pub mangle_v6: TableChanges,
    /// ebtables' nat table (anti-spoofing on bridge ports).
    pub bridge: TableChanges,
    /// Owned sets to destroy.
    pub destroy_sets: Vec<String>,
}

/// Whether `installed` has the `DOCKER-USER` chain: a rule in it means
/// the chain exists, whatever else says.
fn has_docker_user(installed: &Table) -> bool {
    installed.docker_user || installed.jumps.iter().any(|(c, _)| c == DOCKER_USER)
}

/// The jumps of `desired` that go into a chain `installed` has: all but
/// those into `DOCKER-USER` where that chain does not exist.
fn wanted_jumps<'a>(
    desired: &'a Table,
    installed: &Table,
) -> impl Iterator<Item = &'a (String, String)> {
    let docker_user = has_docker_user(installed);
    desired
        .jumps
        .iter()
        .filter(move |(chain, _)| chain != DOCKER_USER || docker_user)
}

/// The owned state the kernel holds once the changes from `installed` to
/// `desired` are written: `desired`, with each table's jumps only where
/// their chain exists, each once and none buried. The entries of learned
/// sets are not known (reconcile never touches them). What the next
/// reconcile diffs from without reading the kernel.
pub fn written(mut desired: State, installed: &State) -> State {
    let tables = [
        (&mut desired.v4, &installed.v4),
        (&mut desired.v6, &installed.v6),
        (&mut desired.raw_v4, &installed.raw_v4),
        (&mut desired.raw_v6, &installed.raw_v6),
        (&mut desired.mangle_v4, &installed.mangle_v4),
        (&mut desired.mangle_v6, &installed.mangle_v6),
        (&mut desired.bridge, &installed.bridge),
    ];
    for (table, installed) in tables {
        let mut jumps: Vec<(String, String)> = Vec::new();
        for jump in wanted_jumps(table, installed) {
            if !jumps.contains(jump) {
                jumps.push(jump.clone());
            }
        }
        table.jumps = jumps;
        table.docker_user = has_docker_user(installed);
        table.buried.clear();
    }
    desired
}

impl Changes {
    pub fn between(desired: &State, installed: &State) -> Changes {
        let sets = desired
            .sets
            .iter()
            .filter_map(|(name, set)| match installed.sets.get(name) {
                Some(current) if current.members == set.members => None,
                Some(current) => Some((
                    name.clone(),
                    SetWrite {
                        set: set.clone(),
                        exists: true,
                        add: set.members.difference(&current.members).copied().collect(),
                        remove: current.members.difference(&set.members).copied().collect(),
                    },
                )),
                None => Some((
                    name.clone(),
                    SetWrite {
                        set: set.clone(),
                        exists: false,
                        add: set.members.iter().copied().collect(),
                        remove: Vec::new(),
                    },
                )),
            })
            .collect();
        let ranges = refills(&desired.ranges, &installed.ranges);
        let sources = refills(&desired.sources, &installed.sources);
        let create_learned = desired
            .learned
            .iter()
            .filter(|(name, _)| !installed.learned.contains_key(*name))
            .map(|(name, set)| (name.clone(), set.family))
            .collect();
        let create_cache = desired
            .cache
            .iter()
            .filter(|(name, _)| !installed.cache.contains_key(*name))
            .map(|(name, set)| (name.clone(), set.clone()))
            .collect();
        let cache_lists = desired
            .cache_lists
            .iter()
            .filter_map(|(name, held)| {
                let installed = installed.cache_lists.get(name);
                let write = ListWrite {
                    exists: installed.is_some(),
                    add: held
                        .iter()
                        .filter(|set| !installed.is_some_and(|i| i.contains(*set)))
                        .cloned()
                        .collect(),
                    remove: installed
                        .into_iter()
                        .flatten()
                        .filter(|set| !held.contains(*set))
                        .cloned()
                        .collect(),
                };
                (!write.exists || !write.add.is_empty() || !write.remove.is_empty())
                    .then(|| (name.clone(), write))
            })
            .collect();
        // A lookup set first: the sets it holds cannot be destroyed
        // before it.
        let destroy_sets = installed
            .cache_lists
            .keys()
            .filter(|name| !desired.cache_lists.contains_key(*name))
            .chain(
                installed
                    .sets
                    .keys()
                    .filter(|name| !desired.sets.contains_key(*name)),
            )
            .chain(
                installed
                    .learned
                    .keys()
                    .filter(|name| !desired.learned.contains_key(*name)),
            )
            .chain(
                installed
                    .cache
                    .keys()
                    .filter(|name| !desired.cache.contains_key(*name)),
            )
            .chain(
                installed
                    .ranges
                    .keys()
                    .filter(|name| !desired.ranges.contains_key(*name)),
            )
            .chain(
                installed
                    .sources
                    .keys()
                    .filter(|name| !desired.sources.contains_key(*name)),
            )
            .cloned()
            .collect();
        Changes {
            sets,
            ranges,
            sources,
            create_learned,
            create_cache,
            cache_lists,
            v4: TableChanges::between(&desired.v4, &installed.v4),
            v6: TableChanges::between(&desired.v6, &installed.v6),
            raw_v4: TableChanges::between(&desired.raw_v4, &installed.raw_v4),
            raw_v6: TableChanges::between(&desired.raw_v6, &installed.raw_v6),
            mangle_v4: TableChanges::between(&desired.mangle_v4, &installed.mangle_v4),
            mangle_v6: TableChanges::between(&desired.mangle_v6, &installed.mangle_v6),
            bridge: TableChanges::between(&desired.bridge, &installed.bridge),
            destroy_sets,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
            && self.ranges.is_empty()
            && self.sources.is_empty()
            && self.create_learned.is_empty()
            && self.create_cache.is_empty()
            && self.cache_lists.is_empty()
            && self.v4.is_empty()
            && self.v6.is_empty()
            && self.raw_v4.is_empty()
            && self.raw_v6.is_empty()
            && self.mangle_v4.is_empty()
            && self.mangle_v6.is_empty()
            && self.bridge.is_empty()
            && self.destroy_sets.is_empty()
    }

    /// What the changes repair, in a few words per part, for a log line
    /// (`iptables: chain TOLLGATE-INPUT rewritten; ipset: tollgate-endpoints-v4
    /// changed`).
    pub fn summary(&self) -> String {
        self.items().join("; ")
    }

    /// The parts of [`Changes::summary`], one each.
    pub fn items(&self) -> Vec<String> {
        let mut parts = Vec::new();
        let tables = Family::ALL
            .iter()
            .map(|&family| (self.table(family), family.command().to_string()))
            .chain(
                Family::ALL
                    .iter()
                    .map(|&family| (self.raw(family), format!("{} -t raw", family.command()))),
            )
            .chain(Family::ALL.iter().map(|&family| {
                (
                    self.mangle(family),
                    format!("{} -t mangle", family.command()),
                )
            }))
            .chain([(&self.bridge, "ebtables -t nat".to_string())]);
        for (table, command) in tables {
            for name in table.write.keys() {
                parts.push(format!("{command}: chain {name} rewritten"));
            }
            for name in &table.remove {
                parts.push(format!("{command}: chain {name} removed"));
            }
            for (chain, rule) in &table.insert_jumps {
                parts.push(format!("{command}: jump `-A {chain} {rule}` restored"));
            }
            for (chain, rule) in &table.delete_jumps {
                parts.push(format!("{command}: jump `-A {chain} {rule}` deleted"));
            }
        }
        let written = self
            .sets
            .iter()
            .map(|(name, write)| (name, write.exists, "changed"))
            .chain(
                self.ranges
                    .iter()
                    .map(|(name, write)| (name, write.exists, "refilled")),
            )
            .chain(
                self.sources
                    .iter()
                    .map(|(name, write)| (name, write.exists, "refilled")),
            );
        for (name, exists, verb) in written {
            let verb = if exists { verb } else { "created" };
            parts.push(format!("ipset: {name} {verb}"));
        }
        for name in self.create_learned.keys().chain(self.create_cache.keys()) {
            parts.push(format!("ipset: {name} created"));
        }
        for (name, write) in &self.cache_lists {
            let verb = if write.exists { "changed" } else { "created" };
            parts.push(format!("ipset: {name} {verb}"));
        }
        for name in &self.destroy_sets {
            parts.push(format!("ipset: {name} destroyed"));
        }
        parts
    }

    pub fn table(&self, family: Family) -> &TableChanges {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    /// The changes to a family's raw table.
    pub fn raw(&self, family: Family) -> &TableChanges {
        match family {
            Family::V4 => &self.raw_v4,
            Family::V6 => &self.raw_v6,
        }
    }

    /// The changes to a family's mangle table.
    pub fn mangle(&self, family: Family) -> &TableChanges {
        match family {
            Family::V4 => &self.mangle_v4,
            Family::V6 => &self.mangle_v6,
        }
    }

    /// Input for one `iptables-restore --noflush` of a family: its raw
    /// table, its mangle table, then its filter table, each one
    /// transaction. The mangle table decides forwarded connections and the
    /// filter table only carries out its rejects: written in this order,
    /// a batch that stops after the mangle table leaves both decision
    /// points in place, never neither.
    pub fn iptables_restore_text(&self, family: Family) -> Option<String> {
        let texts: Vec<String> = [
            self.raw(family).restore_text_in(TableKind::Raw),
            self.mangle(family).restore_text_in(TableKind::Mangle),
            self.table(family).restore_text_in(TableKind::Filter),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!texts.is_empty()).then(|| texts.concat())
    }

    /// The set writes that create and change sets, in order: the
    /// verdict cache's and the learned sets (empty), then the cache's
    /// lookup sets, each created if missing, the sets it should no longer
    /// hold taken out before those it lacks are put in (never two
    /// generations answered at once), then each address
    /// set created if missing, its additions, then its deletions (never a
    /// refill: a change of one member is one `add` or `del`), then each
    /// range and source set created, or refilled whole ([`refill`]).
    pub fn ipset_prepare(&self) -> Vec<SetCommand> {
        let mut out = Vec::new();
        for (name, set) in &self.create_cache {
            out.push(SetCommand::Create {
                set: name.clone(),
                kind: SetKind::HashIpPortIp,
                family: set.family,
                timeout_secs: Some(set.timeout_secs),
                max_entries: Some(set.max_entries),
            });
        }
        for (name, family) in &self.create_learned {
            out.push(SetCommand::Create {
                set: name.clone(),
                kind: SetKind::HashIp,
                family: *family,
                timeout_secs: Some(LEARNED_DEFAULT_TIMEOUT),
                max_entries: None,
            });
        }
        for (name, write) in &self.cache_lists {
            if !write.exists {
                out.push(create(name, SetKind::ListSet, Family::V4));
            }
            let held = |set: &String| Entry::Set(set.clone());
            out.extend(write.remove.iter().map(|set| SetCommand::Del {
                set: name.clone(),
                entry: held(set),
            }));
            out.extend(write.add.iter().map(|set| SetCommand::Add {
                set: name.clone(),
                entry: held(set),
            }));
        }
        for (name, write) in &self.sets {
            out.push(create(name, SetKind::HashIp, write.set.family));
            out.extend(write.add.iter().map(|address| SetCommand::Add {
                set: name.clone(),
                entry: Entry::Ip(*address),
            }));
            out.extend(write.remove.iter().map(|address| SetCommand::Del {
                set: name.clone(),
                entry: Entry::Ip(*address),
            }));
        }
        for (name, Refill { set, exists }) in &self.ranges {
            let entries = set
                .ranges
                .iter()
                .map(|net| Entry::Net(*net))
                .chain(set.except.iter().map(|address| Entry::Except(*address)));
            refill(
                &mut out,
                name,
                SetKind::HashNet,
                set.family,
                *exists,
                entries,
            );
        }
        for (name, Refill { set, exists }) in &self.sources {
            let entries = set
                .entries
                .iter()
                .map(|(net, interface)| Entry::NetIface(*net, interface.clone()));
            refill(
                &mut out,
                name,
                SetKind::HashNetIface,
                set.family,
                *exists,
                entries,
            );
        }
        out
    }

    /// The set writes that destroy stale sets.
    pub fn ipset_cleanup(&self) -> Vec<SetCommand> {
        self.destroy_sets
            .iter()
            .map(|name| SetCommand::Destroy { set: name.clone() })
            .collect()
    }
}

/// `create` of a set with the kernel's defaults.
fn create(name: &str, kind: SetKind, family: Family) -> SetCommand {
    SetCommand::Create {
        set: name.to_string(),
        kind,
        family,
        timeout_secs: None,
        max_entries: None,
    }
}

/// The writes that create set `name` of `kind` filled with `entries`, or,
/// when it `exists`, fill a temporary set and swap it in whole (no moment
/// with a half-filled set).
fn refill(
    out: &mut Vec<SetCommand>,
    name: &str,
    kind: SetKind,
    family: Family,
    exists: bool,
    entries: impl Iterator<Item = Entry>,
) {
    out.push(create(name, kind, family));
    let fill = if exists {
        let next = format!("{name}{NEXT_SUFFIX}");
        out.push(create(&next, kind, family));
        out.push(SetCommand::Flush { set: next.clone() });
        next
    } else {
        name.to_string()
    };
    out.extend(entries.map(|entry| SetCommand::Add {
        set: fill.clone(),
        entry,
    }));
    if exists {
        out.push(SetCommand::Swap {
            set: fill.clone(),
            with: name.to_string(),
        });
        out.push(SetCommand::Destroy { set: fill });
    }
}

/// The set writes as `ipset restore` lines, for tests to read.
#[cfg(test)]
impl Changes {
    pub fn ipset_prepare_text(&self) -> Option<String> {
        lines(self.ipset_prepare())
    }

    pub fn ipset_cleanup_text(&self) -> Option<String> {
        lines(self.ipset_cleanup())
    }
}

#[cfg(test)]
fn lines(commands: Vec<SetCommand>) -> Option<String> {
    (!commands.is_empty()).then(|| commands.iter().map(|c| format!("{c}\n")).collect())
}

#[cfg(test)]
mod tests;
