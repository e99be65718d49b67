//! What must change to turn the installed [`State`] into the desired one,
//! rendered as input for `iptables-restore --noflush` and `ipset restore
//! -exist`. Pure. Owned chains are rewritten whole (declaring `:CHAIN - [0:0]`
//! flushes it inside the same atomic batch); set membership changes go
//! through a temporary set and `swap`, so a set is never seen half-filled.
//!
//! Jumps into `DOCKER-USER` are planned only where that chain exists
//! (tollgate never creates, flushes or reorders it, nor any rule but its
//! own jump). A jump a container runtime buried ([`Table::buried`]) is
//! deleted and inserted at the top again in the same atomic batch.

use std::collections::BTreeMap;
use std::fmt::Write;

#[cfg(test)]
use super::state::LearnedSet;
use super::state::{CacheSet, Family, IpSet, State, Table, TableKind, CACHE_SET_TYPE, DOCKER_USER};

/// Suffix of the temporary set a membership change is built in.
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
        // A rule in DOCKER-USER means the chain exists, whatever else says.
        let docker_user =
            installed.docker_user || installed.jumps.iter().any(|(c, _)| c == DOCKER_USER);
        let wanted: Vec<&(String, String)> = desired
            .jumps
            .iter()
            .filter(|(chain, _)| chain != DOCKER_USER || docker_user)
            .collect();
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

/// The desired content of a set and whether it exists already (then it is
/// refilled through a temporary set and `swap`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetWrite {
    pub set: IpSet,
    pub exists: bool,
}

/// Everything to change, in the order [`super::kernel`] runs it: sets are
/// created or refilled first (rules may refer to them), then the tables,
/// then sets no longer referenced are destroyed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Sets to create or refill, by name.
    pub sets: BTreeMap<String, SetWrite>,
    /// Timeout sets to create (empty), by name. Existing ones are kept
    /// with their entries.
    pub create_learned: BTreeMap<String, Family>,
    /// Verdict cache sets to create (empty), by name.
    pub create_cache: BTreeMap<String, CacheSet>,
    pub v4: TableChanges,
    pub v6: TableChanges,
    /// The raw tables (anti-spoofing), written with the filter table of
    /// their family.
    pub raw_v4: TableChanges,
    pub raw_v6: TableChanges,
    /// ebtables' nat table (anti-spoofing on bridge ports).
    pub bridge: TableChanges,
    /// Owned sets to destroy.
    pub destroy_sets: Vec<String>,
}

impl Changes {
    pub fn between(desired: &State, installed: &State) -> Changes {
        let sets = desired
            .sets
            .iter()
            .filter_map(|(name, set)| match installed.sets.get(name) {
                Some(current) if current.members == set.members => None,
                current => Some((
                    name.clone(),
                    SetWrite {
                        set: set.clone(),
                        exists: current.is_some(),
                    },
                )),
            })
            .collect();
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
        let destroy_sets = installed
            .sets
            .keys()
            .filter(|name| !desired.sets.contains_key(*name))
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
            .cloned()
            .collect();
        Changes {
            sets,
            create_learned,
            create_cache,
            v4: TableChanges::between(&desired.v4, &installed.v4),
            v6: TableChanges::between(&desired.v6, &installed.v6),
            raw_v4: TableChanges::between(&desired.raw_v4, &installed.raw_v4),
            raw_v6: TableChanges::between(&desired.raw_v6, &installed.raw_v6),
            bridge: TableChanges::between(&desired.bridge, &installed.bridge),
            destroy_sets,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
            && self.create_learned.is_empty()
            && self.create_cache.is_empty()
            && self.v4.is_empty()
            && self.v6.is_empty()
            && self.raw_v4.is_empty()
            && self.raw_v6.is_empty()
            && self.bridge.is_empty()
            && self.destroy_sets.is_empty()
    }

    /// What the changes repair, in a few words per part, for a log line
    /// (`iptables: chain TOLLGATE-INPUT rewritten; ipset: tollgate-endpoints-v4
    /// refilled`).
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
        for (name, write) in &self.sets {
            let verb = if write.exists { "refilled" } else { "created" };
            parts.push(format!("ipset: {name} {verb}"));
        }
        for name in self.create_learned.keys().chain(self.create_cache.keys()) {
            parts.push(format!("ipset: {name} created"));
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

    /// Input for one `iptables-restore --noflush` of a family: its raw
    /// table, then its filter table, each one transaction.
    pub fn iptables_restore_text(&self, family: Family) -> Option<String> {
        let raw = self.raw(family).restore_text_in(TableKind::Raw);
        let filter = self.table(family).restore_text_in(TableKind::Filter);
        match (raw, filter) {
            (None, None) => None,
            (raw, filter) => Some(raw.unwrap_or_default() + &filter.unwrap_or_default()),
        }
    }

    /// Input for `ipset restore -exist` that creates and refills sets.
    pub fn ipset_prepare_text(&self) -> Option<String> {
        if self.sets.is_empty() && self.create_learned.is_empty() && self.create_cache.is_empty() {
            return None;
        }
        let mut out = String::new();
        for (name, set) in &self.create_cache {
            writeln!(
                out,
                "create {name} {CACHE_SET_TYPE} family {} timeout {} maxelem {}",
                set.family.ipset_family(),
                set.timeout_secs,
                set.max_entries
            )
            .expect("write to String");
        }
        for (name, family) in &self.create_learned {
            let family = family.ipset_family();
            writeln!(
                out,
                "create {name} hash:ip family {family} timeout {LEARNED_DEFAULT_TIMEOUT}"
            )
            .expect("write to String");
        }
        for (name, SetWrite { set, exists }) in &self.sets {
            let family = set.family.ipset_family();
            writeln!(out, "create {name} hash:ip family {family}").expect("write to String");
            let fill = if *exists {
                let next = format!("{name}{NEXT_SUFFIX}");
                writeln!(out, "create {next} hash:ip family {family}").expect("write to String");
                writeln!(out, "flush {next}").expect("write to String");
                next
            } else {
                name.clone()
            };
            for member in &set.members {
                writeln!(out, "add {fill} {member}").expect("write to String");
            }
            if *exists {
                writeln!(out, "swap {fill} {name}").expect("write to String");
                writeln!(out, "destroy {fill}").expect("write to String");
            }
        }
        Some(out)
    }

    /// Input for `ipset restore -exist` that destroys stale sets.
    pub fn ipset_cleanup_text(&self) -> Option<String> {
        if self.destroy_sets.is_empty() {
            return None;
        }
        Some(
            self.destroy_sets
                .iter()
                .map(|name| format!("destroy {name}\n"))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jump(chain: &str) -> (String, String) {
        ("INPUT".into(), format!("-j {chain}"))
    }

    #[test]
    fn summary_names_every_repair() {
        let mut desired = State::default();
        desired
            .v4
            .chains
            .insert("TOLLGATE-INPUT".into(), vec!["-j ACCEPT".into()]);
        desired.v4.jumps.push(jump("TOLLGATE-INPUT"));
        desired.sets.insert(
            "tollgate-endpoints-v4".into(),
            IpSet {
                family: Family::V4,
                members: ["10.0.0.1".parse().unwrap()].into(),
            },
        );
        let mut installed = desired.clone();
        installed
            .v4
            .chains
            .insert("TOLLGATE-INPUT".into(), Vec::new());
        installed.v4.jumps.clear();
        installed
            .sets
            .get_mut("tollgate-endpoints-v4")
            .unwrap()
            .members
            .clear();
        assert_eq!(
            Changes::between(&desired, &installed).summary(),
            "iptables: chain TOLLGATE-INPUT rewritten; \
             iptables: jump `-A INPUT -j TOLLGATE-INPUT` restored; \
             ipset: tollgate-endpoints-v4 refilled"
        );
        assert_eq!(Changes::between(&desired, &desired).summary(), "");
    }

    #[test]
    fn duplicate_and_foreign_jumps_are_reconciled() {
        let desired = Table {
            chains: [("TOLLGATE-INPUT".into(), vec!["-j RETURN".into()])].into(),
            jumps: vec![jump("TOLLGATE-INPUT")],
            ..Table::default()
        };
        let installed = Table {
            chains: [
                ("TOLLGATE-INPUT".into(), vec!["-j RETURN".into()]),
                ("TOLLGATE-OLD".into(), vec![]),
            ]
            .into(),
            jumps: vec![
                jump("TOLLGATE-INPUT"),
                jump("TOLLGATE-OLD"),
                jump("TOLLGATE-INPUT"),
            ],
            ..Table::default()
        };
        let changes = TableChanges::between(&desired, &installed);
        assert_eq!(
            changes.restore_text().unwrap(),
            "*filter\n:TOLLGATE-OLD - [0:0]\n-D INPUT -j TOLLGATE-INPUT\n-D INPUT -j TOLLGATE-OLD\n\
             -X TOLLGATE-OLD\nCOMMIT\n"
        );
        let missing = Table {
            jumps: vec![],
            ..installed.clone()
        };
        let changes = TableChanges::between(&desired, &missing);
        assert_eq!(changes.insert_jumps, vec![jump("TOLLGATE-INPUT")]);
        assert_eq!(changes.remove, vec!["TOLLGATE-OLD".to_string()]);
    }

    /// FORWARD and DOCKER-USER as dockerd leaves them after a restart that
    /// found tollgate's jumps: its own jump back at the top of FORWARD.
    const DOCKER_RESTARTED: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-USER - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j TOLLGATE-FORWARD
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A DOCKER-USER -j TOLLGATE-FORWARD
-A DOCKER-USER -j RETURN
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

    fn forward_plan() -> Table {
        Table {
            chains: [("TOLLGATE-FORWARD".into(), vec!["-j RETURN".into()])].into(),
            jumps: vec![
                ("FORWARD".into(), "-j TOLLGATE-FORWARD".into()),
                (DOCKER_USER.into(), "-j TOLLGATE-FORWARD".into()),
            ],
            ..Table::default()
        }
    }

    #[test]
    fn docker_user_jump_only_where_docker_made_the_chain() {
        let plain = Table::parse(
            "*filter\n:FORWARD ACCEPT [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
             -A FORWARD -j TOLLGATE-FORWARD\n-A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n",
        );
        assert!(!plain.docker_user);
        assert!(
            TableChanges::between(&forward_plan(), &plain).is_empty(),
            "no DOCKER-USER: nothing to hook there, nothing created"
        );
        let docker = Table::parse(
            "*filter\n:FORWARD DROP [0:0]\n:DOCKER-USER - [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
             -A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n\
             -A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n",
        );
        assert!(docker.docker_user && docker.buried.is_empty());
        let changes = TableChanges::between(&forward_plan(), &docker);
        assert_eq!(
            changes.restore_text().unwrap(),
            "*filter\n-I DOCKER-USER 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
            "inserted without declaring (flushing) Docker's chain"
        );
        // Teardown takes the jump out of DOCKER-USER and nothing else.
        let mut installed = docker.clone();
        installed
            .jumps
            .push((DOCKER_USER.into(), "-j TOLLGATE-FORWARD".into()));
        let removed = TableChanges::between(&Table::default(), &installed);
        assert_eq!(
            removed.restore_text().unwrap(),
            "*filter\n:TOLLGATE-FORWARD - [0:0]\n-D FORWARD -j TOLLGATE-FORWARD\n\
             -D DOCKER-USER -j TOLLGATE-FORWARD\n-X TOLLGATE-FORWARD\nCOMMIT\n"
        );
    }

    #[test]
    fn jump_buried_under_dockers_goes_back_to_the_top_in_one_batch() {
        let installed = Table::parse(DOCKER_RESTARTED);
        assert_eq!(
            installed.buried,
            vec![("FORWARD".to_string(), "-j TOLLGATE-FORWARD".to_string())]
        );
        let changes = TableChanges::between(&forward_plan(), &installed);
        assert_eq!(
            changes.restore_text().unwrap(),
            "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n"
        );
        // Once on top again, nothing changes.
        let repaired = DOCKER_RESTARTED.replace(
            "-A FORWARD -j DOCKER-USER\n-A FORWARD -j TOLLGATE-FORWARD\n",
            "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n",
        );
        assert!(TableChanges::between(&forward_plan(), &Table::parse(&repaired)).is_empty());
        // Other foreign rules above tollgate's jump are left alone (no
        // fight with agents that keep their own jump on top).
        let foreign = |above: &str| {
            Table::parse(&format!(
                "*filter\n:FORWARD ACCEPT [0:0]\n:TOLLGATE-FORWARD - [0:0]\n\
                 {above}-A FORWARD -j TOLLGATE-FORWARD\n\
                 -A TOLLGATE-FORWARD -j RETURN\nCOMMIT\n"
            ))
        };
        let calico = foreign("-A FORWARD -m comment --comment \"cali:x\" -j cali-FORWARD\n");
        assert!(calico.buried.is_empty());
        assert!(TableChanges::between(&forward_plan(), &calico).is_empty());
        // CNI's firewall plugin (podman 4) accepts container traffic in
        // CNI-FORWARD: tollgate goes back above it.
        let cni = foreign(
            "-A FORWARD -m comment --comment \"CNI firewall plugin rules\" -j CNI-FORWARD\n",
        );
        assert_eq!(cni.buried.len(), 1);
        assert_eq!(
            TableChanges::between(&forward_plan(), &cni).insert_jumps,
            vec![("FORWARD".to_string(), "-j TOLLGATE-FORWARD".to_string())]
        );
    }

    fn forward_jump() -> (String, String) {
        ("FORWARD".into(), "-j TOLLGATE-FORWARD".into())
    }

    /// FORWARD as netavark 1.4's iptables driver leaves it (podman with
    /// `--network-backend netavark`, captured from `iptables-save`), with
    /// tollgate's jump on top; netavark inserts its own jump at the top
    /// when it is missing (its first network in the namespace, or after a
    /// flush), which buries tollgate's.
    const NETAVARK: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:NETAVARK_FORWARD - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j TOLLGATE-FORWARD
-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD
-A NETAVARK_FORWARD -d 10.88.0.0/16 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A NETAVARK_FORWARD -s 10.88.0.0/16 -j ACCEPT
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

    #[test]
    fn netavark_forward_layout() {
        let installed = Table::parse(NETAVARK);
        assert!(!installed.docker_user, "no DOCKER-USER on a podman host");
        assert!(installed.buried.is_empty());
        assert!(
            TableChanges::between(&forward_plan(), &installed).is_empty(),
            "on top of netavark's jump: nothing to do, DOCKER-USER not created"
        );
        let buried = NETAVARK.replace(
            "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD\n",
            "-A FORWARD -m comment --comment \"netavark firewall plugin rules\" -j NETAVARK_FORWARD\n-A FORWARD -j TOLLGATE-FORWARD\n",
        );
        let installed = Table::parse(&buried);
        assert_eq!(installed.buried, vec![forward_jump()]);
        assert_eq!(
            TableChanges::between(&forward_plan(), &installed)
                .restore_text()
                .unwrap(),
            "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
            "moved back above NETAVARK_FORWARD in one batch, netavark's chain not declared"
        );
    }

    /// FORWARD as Docker 28 lays it out (moby 28's `DOCKER-FORWARD`, with
    /// `DOCKER-CT` and `DOCKER-BRIDGE` under it; `DOCKER-USER` first),
    /// after a dockerd restart that found tollgate's jumps: its two jumps
    /// back at the top of FORWARD.
    const DOCKER_28_RESTARTED: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-BRIDGE - [0:0]
:DOCKER-CT - [0:0]
:DOCKER-FORWARD - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
:TOLLGATE-FORWARD - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-FORWARD
-A FORWARD -j TOLLGATE-FORWARD
-A DOCKER ! -i docker0 -o docker0 -j DROP
-A DOCKER-BRIDGE -o docker0 -j DOCKER
-A DOCKER-CT -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A DOCKER-FORWARD -j DOCKER-CT
-A DOCKER-FORWARD -j DOCKER-ISOLATION-STAGE-1
-A DOCKER-FORWARD -j DOCKER-BRIDGE
-A DOCKER-FORWARD -i docker0 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-USER -j TOLLGATE-FORWARD
-A TOLLGATE-FORWARD -j RETURN
COMMIT
";

    #[test]
    fn docker_28_forward_layout() {
        let installed = Table::parse(DOCKER_28_RESTARTED);
        assert!(installed.docker_user);
        assert_eq!(
            installed.buried,
            vec![forward_jump()],
            "below DOCKER-USER and DOCKER-FORWARD"
        );
        let changes = TableChanges::between(&forward_plan(), &installed);
        assert_eq!(
            changes.restore_text().unwrap(),
            "*filter\n-D FORWARD -j TOLLGATE-FORWARD\n-I FORWARD 1 -j TOLLGATE-FORWARD\nCOMMIT\n",
            "one batch; DOCKER-USER keeps its jump, no Docker chain declared"
        );
        let repaired = DOCKER_28_RESTARTED.replace(
            "-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD\n-A FORWARD -j TOLLGATE-FORWARD\n",
            "-A FORWARD -j TOLLGATE-FORWARD\n-A FORWARD -j DOCKER-USER\n-A FORWARD -j DOCKER-FORWARD\n",
        );
        let installed = Table::parse(&repaired);
        assert!(installed.buried.is_empty());
        assert!(TableChanges::between(&forward_plan(), &installed).is_empty());
        // Only DOCKER-FORWARD above tollgate's jump (a Docker 28 host whose
        // DOCKER-USER jump was deleted by hand) buries it too.
        let only_forward = DOCKER_28_RESTARTED.replace("-A FORWARD -j DOCKER-USER\n", "");
        assert_eq!(Table::parse(&only_forward).buried, vec![forward_jump()]);
    }

    #[test]
    fn membership_change_swaps_and_stale_sets_are_destroyed() {
        let set = |members: &[&str]| IpSet {
            family: Family::V4,
            members: members.iter().map(|m| m.parse().unwrap()).collect(),
        };
        let mut desired = State::default();
        desired
            .sets
            .insert("tollgate-a".into(), set(&["10.0.0.1", "10.0.0.2"]));
        desired.sets.insert("tollgate-b".into(), set(&["10.0.0.3"]));
        let mut installed = State::default();
        installed
            .sets
            .insert("tollgate-a".into(), set(&["10.0.0.1"]));
        installed.sets.insert("tollgate-old".into(), set(&[]));
        let changes = Changes::between(&desired, &installed);
        assert_eq!(
            changes.ipset_prepare_text().unwrap(),
            "create tollgate-a hash:ip family inet\n\
             create tollgate-a-next hash:ip family inet\nflush tollgate-a-next\n\
             add tollgate-a-next 10.0.0.1\nadd tollgate-a-next 10.0.0.2\n\
             swap tollgate-a-next tollgate-a\ndestroy tollgate-a-next\n\
             create tollgate-b hash:ip family inet\nadd tollgate-b 10.0.0.3\n"
        );
        assert_eq!(
            changes.ipset_cleanup_text().unwrap(),
            "destroy tollgate-old\n"
        );
        assert!(changes.v4.restore_text().is_none());
    }

    #[test]
    fn learned_sets_are_created_empty_kept_with_entries_and_destroyed() {
        let learned = |entries: Vec<(std::net::IpAddr, u32)>| LearnedSet {
            family: Family::V4,
            entries,
        };
        let mut desired = State::default();
        desired
            .learned
            .insert("tollgate-fqdn-a-v4".into(), learned(vec![]));
        desired
            .learned
            .insert("tollgate-fqdn-b-v4".into(), learned(vec![]));
        let mut installed = State::default();
        installed.learned.insert(
            "tollgate-fqdn-a-v4".into(),
            learned(vec![("10.0.0.1".parse().unwrap(), 30)]),
        );
        installed
            .learned
            .insert("tollgate-fqdn-old-v4".into(), learned(vec![]));
        let changes = Changes::between(&desired, &installed);
        assert_eq!(
            changes.ipset_prepare_text().unwrap(),
            "create tollgate-fqdn-b-v4 hash:ip family inet timeout 300\n"
        );
        assert_eq!(
            changes.ipset_cleanup_text().unwrap(),
            "destroy tollgate-fqdn-old-v4\n"
        );
        installed
            .learned
            .insert("tollgate-fqdn-b-v4".into(), learned(vec![]));
        installed.learned.remove("tollgate-fqdn-old-v4");
        assert!(Changes::between(&desired, &installed).is_empty());
    }
}
