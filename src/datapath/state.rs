//! The netfilter state tollgate owns, as one value: the `TOLLGATE-*` chains
//! and the jumps into them per address family (from the built-in chains
//! and from Docker's `DOCKER-USER`) in the filter table, the forward
//! decisions in the mangle table, the anti-spoofing
//! chains of the raw table and of ebtables' nat table ([`TableKind`]), and
//! the `tollgate-*` ipsets; plus the
//! two facts about foreign chains the plan depends on (whether
//! `DOCKER-USER` exists, which jumps a foreign rule precedes), never their
//! rules.
//! The desired state ([`super::plan`]) and the installed state (parsed here
//! from `iptables-save` / `ipset save` text) have the same type, so
//! reconciling is a diff of two values. Parsing only; never runs commands.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

/// A built-in hook of the filter table and the owned chain it jumps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    Input,
    Forward,
    Output,
}

impl Hook {
    pub const ALL: [Hook; 3] = [Hook::Input, Hook::Forward, Hook::Output];

    pub fn builtin(self) -> &'static str {
        match self {
            Hook::Input => "INPUT",
            Hook::Forward => "FORWARD",
            Hook::Output => "OUTPUT",
        }
    }

    pub fn chain(self) -> &'static str {
        match self {
            Hook::Input => "TOLLGATE-INPUT",
            Hook::Forward => "TOLLGATE-FORWARD",
            Hook::Output => "TOLLGATE-OUTPUT",
        }
    }
}

/// Prefix of every chain tollgate owns.
pub const CHAIN_PREFIX: &str = "TOLLGATE-";
/// Prefix of every ipset tollgate owns.
pub const SET_PREFIX: &str = "tollgate-";
/// Built-in chains of the filter table that may jump into owned chains.
pub const BUILTIN_CHAINS: [&str; 3] = ["INPUT", "FORWARD", "OUTPUT"];
/// Docker's chain for user policy, which FORWARD jumps to before Docker's
/// own rules. Docker owns it; tollgate only inserts its forward jump
/// there and deletes it again.
pub const DOCKER_USER: &str = "DOCKER-USER";
/// Chains of container runtimes that FORWARD jumps to and that accept
/// container traffic (Docker's, CNI's firewall plugin's, netavark's
/// iptables driver's): tollgate's FORWARD jump must come before a jump to
/// any of them (see [`Table::buried`]).
pub const RUNTIME_CHAINS: [&str; 4] = [
    DOCKER_USER,
    "DOCKER-FORWARD",
    "CNI-FORWARD",
    "NETAVARK_FORWARD",
];

/// Which netfilter table a [`Table`] holds the owned part of, and how its
/// `*-save`/`*-restore` spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// iptables' and ip6tables' filter table: the policy chains.
    Filter,
    /// iptables' and ip6tables' raw table: anti-spoofing, before conntrack.
    Raw,
    /// iptables' and ip6tables' mangle table: the forward hook's decisions,
    /// ahead of the filter table where container runtimes write.
    Mangle,
    /// ebtables' nat table (the bridge family's prerouting hook):
    /// anti-spoofing per bridge port.
    BridgeNat,
}

impl TableKind {
    /// The table's name after `*`.
    pub fn name(self) -> &'static str {
        match self {
            TableKind::Filter => "filter",
            TableKind::Raw => "raw",
            TableKind::Mangle => "mangle",
            TableKind::BridgeNat => "nat",
        }
    }

    /// The built-in chains that may jump into owned chains.
    pub fn builtins(self) -> &'static [&'static str] {
        match self {
            TableKind::Filter => &BUILTIN_CHAINS,
            TableKind::Mangle => &["FORWARD", "POSTROUTING"],
            TableKind::Raw | TableKind::BridgeNat => &["PREROUTING"],
        }
    }

    /// The line that declares (and so flushes) an owned chain in restore
    /// input: user chains of ebtables carry a policy, RETURN for ours.
    pub fn declare(self, chain: &str) -> String {
        match self {
            TableKind::Filter | TableKind::Raw | TableKind::Mangle => format!(":{chain} - [0:0]"),
            TableKind::BridgeNat => format!(":{chain} RETURN"),
        }
    }
}

/// IP family: one iptables table per family, one ipset per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    pub fn of(addr: &IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// `family` argument of `ipset create`.
    pub fn ipset_family(self) -> &'static str {
        match self {
            Family::V4 => "inet",
            Family::V6 => "inet6",
        }
    }

    /// `iptables` / `ip6tables`, for messages.
    pub fn command(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }
}

/// The owned part of one family's filter table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Owned chain → its rules, each as `iptables-save` prints it after
    /// `-A CHAIN ` (e.g. `-i lo -j ACCEPT`).
    pub chains: BTreeMap<String, Vec<String>>,
    /// Rules in built-in chains (and in `DOCKER-USER`) that jump to owned
    /// chains, as `(chain, rule)`, once per occurrence.
    pub jumps: Vec<(String, String)>,
    /// Whether the table has Docker's `DOCKER-USER` chain (not owned).
    pub docker_user: bool,
    /// Jumps of `jumps` that must move back to the top of their chain,
    /// once each: in the filter table's FORWARD, one that a jump to a
    /// container runtime's chain ([`RUNTIME_CHAINS`]) precedes (as after
    /// dockerd re-inserted its `-j DOCKER-USER` at the top); in
    /// `DOCKER-USER` and in the mangle table's FORWARD (where no runtime
    /// writes), one that any rule precedes. Other foreign rules above a
    /// jump (Calico's, kube-router's, which re-check their own position)
    /// are left alone.
    pub buried: Vec<(String, String)>,
}

/// An owned `hash:ip` ipset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSet {
    pub family: Family,
    pub members: BTreeSet<IpAddr>,
}

/// An owned `hash:ip` ipset with per-entry timeouts whose members the DNS
/// worker writes (FQDN sets). Reconcile creates and destroys such sets but
/// never touches their members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearnedSet {
    pub family: Family,
    /// Installed entries with their remaining timeout in seconds, as
    /// `ipset save` lists them (always empty in a desired state).
    pub entries: Vec<(IpAddr, u32)>,
}

/// An owned `hash:net` ipset of address ranges with exceptions: an
/// address matches when a range holds it and it is not an exception
/// (`nomatch` entries). The unknown addresses of the local endpoint
/// ranges ([`crate::ruleset::Enforced::is_unknown`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSet {
    pub family: Family,
    pub ranges: BTreeSet<IpNet>,
    pub except: BTreeSet<IpAddr>,
}

/// The ipset type of [`RangeSet`]s.
pub const RANGE_SET_TYPE: &str = "hash:net";

/// An owned `hash:net,iface` ipset of (source, incoming interface) pairs:
/// the sources each guarded interface may send from (anti-spoofing's one
/// lookup, [`super::antispoof`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSet {
    pub family: Family,
    pub entries: BTreeSet<(IpNet, String)>,
}

/// The ipset type of [`SourceSet`]s.
pub const SOURCE_SET_TYPE: &str = "hash:net,iface";

/// An owned `hash:ip,port,ip` ipset of the verdict cache (`src,proto:port,
/// dst` with per-entry timeouts), whose members the connection workers
/// write. Reconcile creates and destroys such sets but never touches
/// their members, which it does not even read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSet {
    pub family: Family,
    /// Seconds an entry lives (the set's default timeout).
    pub timeout_secs: u32,
    pub max_entries: u32,
}

/// Everything tollgate owns in one network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The filter tables.
    pub v4: Table,
    pub v6: Table,
    /// The raw tables (anti-spoofing).
    pub raw_v4: Table,
    pub raw_v6: Table,
    /// The mangle tables (the forward hook's decisions).
    pub mangle_v4: Table,
    pub mangle_v6: Table,
    /// ebtables' nat table (anti-spoofing on bridge ports).
    pub bridge: Table,
    pub sets: BTreeMap<String, IpSet>,
    /// Sets with timeouts (`create … timeout N`), by name.
    pub learned: BTreeMap<String, LearnedSet>,
    /// Verdict cache sets, by name.
    pub cache: BTreeMap<String, CacheSet>,
    /// The verdict cache's lookup sets (`list:set`), by name, with the
    /// names of the sets each holds: the rules name these, and a new
    /// generation changes only what they hold.
    pub cache_lists: BTreeMap<String, BTreeSet<String>>,
    /// Range sets, by name.
    pub ranges: BTreeMap<String, RangeSet>,
    /// Anti-spoofing's source sets, by name.
    pub sources: BTreeMap<String, SourceSet>,
}

impl State {
    pub fn table(&self, family: Family) -> &Table {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    pub fn table_mut(&mut self, family: Family) -> &mut Table {
        match family {
            Family::V4 => &mut self.v4,
            Family::V6 => &mut self.v6,
        }
    }

    /// The raw table of a family.
    pub fn raw(&self, family: Family) -> &Table {
        match family {
            Family::V4 => &self.raw_v4,
            Family::V6 => &self.raw_v6,
        }
    }

    pub fn raw_mut(&mut self, family: Family) -> &mut Table {
        match family {
            Family::V4 => &mut self.raw_v4,
            Family::V6 => &mut self.raw_v6,
        }
    }

    /// The mangle table of a family.
    pub fn mangle(&self, family: Family) -> &Table {
        match family {
            Family::V4 => &self.mangle_v4,
            Family::V6 => &self.mangle_v6,
        }
    }

    pub fn mangle_mut(&mut self, family: Family) -> &mut Table {
        match family {
            Family::V4 => &mut self.mangle_v4,
            Family::V6 => &mut self.mangle_v6,
        }
    }

    /// The installed state from `iptables-save -t filter`,
    /// `ip6tables-save -t filter` and `ipset save` output (the raw and
    /// raw, mangle and bridge tables empty: [`Table::parse_in`] reads them).
    pub fn parse(iptables_save: &str, ip6tables_save: &str, ipset_save: &str) -> State {
        let (sets, learned) = parse_ipset_save(ipset_save);
        State {
            v4: Table::parse(iptables_save),
            v6: Table::parse(ip6tables_save),
            sets,
            learned,
            cache: parse_cache_sets(ipset_save),
            cache_lists: parse_cache_lists(ipset_save),
            ranges: parse_range_sets(ipset_save),
            sources: parse_source_sets(ipset_save),
            ..State::default()
        }
    }
}

impl Table {
    /// Whether it holds nothing tollgate owns (foreign facts aside).
    pub fn owns_nothing(&self) -> bool {
        self.chains.is_empty() && self.jumps.is_empty()
    }

    /// Parses the filter table of `iptables-save` output, keeping only what
    /// tollgate owns and the foreign facts of [`Table`]. Lines of other
    /// tables are ignored.
    pub fn parse(save: &str) -> Table {
        Table::parse_in(save, TableKind::Filter)
    }

    /// Parses table `kind` of `iptables-save` (or `ebtables-save`) output,
    /// as [`Table::parse`] does the filter table.
    pub fn parse_in(save: &str, kind: TableKind) -> Table {
        let mut table = Table::default();
        let mut in_filter = false;
        // A jump to a runtime chain seen in FORWARD; any rule seen in
        // DOCKER-USER; any foreign rule seen in the mangle table's FORWARD.
        let (mut runtime_above, mut docker_user_rule, mut foreign_above) = (false, false, false);
        for line in save.lines() {
            if let Some(name) = line.strip_prefix('*') {
                in_filter = name == kind.name();
                continue;
            }
            if !in_filter {
                continue;
            }
            if let Some(decl) = line.strip_prefix(':') {
                let name = decl.split(' ').next().unwrap_or("");
                if name.starts_with(CHAIN_PREFIX) {
                    table.chains.entry(name.to_string()).or_default();
                }
                table.docker_user |= kind == TableKind::Filter && name == DOCKER_USER;
            } else if let Some(rule) = line.strip_prefix("-A ") {
                let Some((chain, spec)) = rule.split_once(' ') else {
                    continue;
                };
                if chain.starts_with(CHAIN_PREFIX) {
                    table
                        .chains
                        .entry(chain.to_string())
                        .or_default()
                        .push(spec.to_string());
                } else if (kind.builtins().contains(&chain)
                    || (kind == TableKind::Filter && chain == DOCKER_USER))
                    && targets_owned_chain(spec)
                {
                    let jump = (chain.to_string(), spec.to_string());
                    let buried = match chain {
                        "FORWARD" if kind == TableKind::Mangle => foreign_above,
                        "FORWARD" => runtime_above,
                        DOCKER_USER => docker_user_rule,
                        _ => false,
                    };
                    if buried && !table.buried.contains(&jump) {
                        table.buried.push(jump.clone());
                    }
                    table.jumps.push(jump);
                } else if chain == "FORWARD" {
                    runtime_above |= jump_target(spec).is_some_and(|t| RUNTIME_CHAINS.contains(&t));
                    foreign_above = true;
                }
                if kind == TableKind::Filter && chain == DOCKER_USER {
                    table.docker_user = true;
                    docker_user_rule = true;
                }
            }
        }
        table
    }
}

/// Whether a rule's target (`-j` or `-g`) is an owned chain.
fn targets_owned_chain(spec: &str) -> bool {
    jump_target(spec).is_some_and(|t| t.starts_with(CHAIN_PREFIX))
}

/// A rule's target (`-j` or `-g`).
fn jump_target(spec: &str) -> Option<&str> {
    let mut words = spec.split(' ');
    while let Some(word) = words.next() {
        if matches!(word, "-j" | "-g") {
            return words.next();
        }
    }
    None
}

/// The owned `hash:ip,port,ip` sets of `ipset save` output (the verdict
/// cache), without their entries.
pub fn parse_cache_sets(save: &str) -> BTreeMap<String, CacheSet> {
    let mut out = BTreeMap::new();
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [create, name, kind, options @ ..] = words.as_slice() else {
            continue;
        };
        if *create != "create" || !name.starts_with(SET_PREFIX) || *kind != CACHE_SET_TYPE {
            continue;
        }
        let option = |key: &str| {
            options
                .windows(2)
                .find(|pair| pair[0] == key)
                .and_then(|pair| pair[1].parse::<u32>().ok())
                .unwrap_or(0)
        };
        out.insert(
            name.to_string(),
            CacheSet {
                family: if options.windows(2).any(|p| p == ["family", "inet6"]) {
                    Family::V6
                } else {
                    Family::V4
                },
                timeout_secs: option("timeout"),
                max_entries: option("maxelem"),
            },
        );
    }
    out
}

/// The ipset type of the verdict cache sets.
pub const CACHE_SET_TYPE: &str = "hash:ip,port,ip";

/// The ipset type of the verdict cache's lookup sets.
pub const CACHE_LIST_TYPE: &str = "list:set";

/// The owned `list:set` sets of `ipset save` output (the verdict cache's
/// lookups) with the names of the sets they hold.
pub fn parse_cache_lists(save: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["create", name, CACHE_LIST_TYPE, ..] if name.starts_with(SET_PREFIX) => {
                out.insert(name.to_string(), BTreeSet::new());
            }
            ["add", name, member, ..] => {
                if let Some(members) = out.get_mut(*name) {
                    members.insert(member.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// Parses `ipset save` output, keeping the owned `hash:ip` sets: plain
/// sets, and sets created with a default `timeout` (whose entries carry
/// theirs).
pub fn parse_ipset_save(save: &str) -> (BTreeMap<String, IpSet>, BTreeMap<String, LearnedSet>) {
    let mut sets = BTreeMap::new();
    let mut learned = BTreeMap::new();
    for line in save.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("create"), Some(name))
                if name.starts_with(SET_PREFIX)
                    && !matches!(
                        words.next(),
                        Some(CACHE_SET_TYPE | CACHE_LIST_TYPE | RANGE_SET_TYPE | SOURCE_SET_TYPE)
                    ) =>
            {
                let family = if line.contains(" family inet6") {
                    Family::V6
                } else {
                    Family::V4
                };
                if line.contains(" timeout ") {
                    learned.insert(
                        name.to_string(),
                        LearnedSet {
                            family,
                            entries: Vec::new(),
                        },
                    );
                } else {
                    sets.insert(
                        name.to_string(),
                        IpSet {
                            family,
                            members: BTreeSet::new(),
                        },
                    );
                }
            }
            (Some("add"), Some(name)) => {
                let Some(member) = words.next().and_then(|m| m.parse::<IpAddr>().ok()) else {
                    continue;
                };
                if let Some(set) = sets.get_mut(name) {
                    set.members.insert(member);
                } else if let Some(set) = learned.get_mut(name) {
                    let timeout = match (words.next(), words.next()) {
                        (Some("timeout"), Some(secs)) => secs.parse().ok(),
                        _ => None,
                    };
                    // An entry without a timeout would be permanent; tollgate
                    // never writes one, so it is not trusted as learned.
                    if let Some(timeout) = timeout.filter(|t| *t > 0) {
                        set.entries.push((member, timeout));
                    }
                }
            }
            _ => {}
        }
    }
    (sets, learned)
}

/// The owned [`RangeSet`]s (`hash:net`) of `ipset save` output with
/// their ranges and exceptions (`nomatch` entries; a single address is
/// saved without its `/32` or `/128`).
pub fn parse_range_sets(save: &str) -> BTreeMap<String, RangeSet> {
    let mut out: BTreeMap<String, RangeSet> = BTreeMap::new();
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["create", name, RANGE_SET_TYPE, options @ ..] if name.starts_with(SET_PREFIX) => {
                let family = family_option(options);
                out.insert(
                    name.to_string(),
                    RangeSet {
                        family,
                        ranges: BTreeSet::new(),
                        except: BTreeSet::new(),
                    },
                );
            }
            ["add", name, entry, rest @ ..] => {
                let Some(set) = out.get_mut(*name) else {
                    continue;
                };
                let Some(net) = net_entry(entry) else {
                    continue;
                };
                if rest.contains(&"nomatch") {
                    set.except.insert(net.addr());
                } else {
                    set.ranges.insert(net);
                }
            }
            _ => {}
        }
    }
    out
}

/// A network entry of `ipset save` (a single address is saved without
/// its `/32` or `/128`).
fn net_entry(entry: &str) -> Option<IpNet> {
    entry
        .parse::<IpNet>()
        .ok()
        .or_else(|| entry.parse::<IpAddr>().ok().map(IpNet::from))
}

/// The family of a set from the options of its `create` line.
fn family_option(options: &[&str]) -> Family {
    if options.windows(2).any(|p| p == ["family", "inet6"]) {
        Family::V6
    } else {
        Family::V4
    }
}

/// One counted rule of `iptables-save -c` or `ebtables-save -c` output,
/// `[packets:bytes] -A CHAIN rule`: its packet counter and the rule from
/// `-A` on.
pub fn counted_rule(line: &str) -> Option<(u64, &str)> {
    let (packets, rest) = line.strip_prefix('[')?.split_once(':')?;
    let (_, rule) = rest.split_once("] ")?;
    Some((packets.parse().ok()?, rule))
}

/// The owned [`SourceSet`]s (`hash:net,iface`) of `ipset save` output
/// (a single address is saved without its `/32` or `/128`).
pub fn parse_source_sets(save: &str) -> BTreeMap<String, SourceSet> {
    let mut out: BTreeMap<String, SourceSet> = BTreeMap::new();
    for line in save.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["create", name, SOURCE_SET_TYPE, options @ ..] if name.starts_with(SET_PREFIX) => {
                let family = family_option(options);
                out.insert(
                    name.to_string(),
                    SourceSet {
                        family,
                        entries: BTreeSet::new(),
                    },
                );
            }
            ["add", name, entry, ..] => {
                let Some(set) = out.get_mut(*name) else {
                    continue;
                };
                let Some((net, interface)) = entry.split_once(',') else {
                    continue;
                };
                if let Some(net) = net_entry(net) {
                    set.entries.insert((net, interface.to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAVE: &str = "\
# Generated by iptables-save v1.8.9 (nf_tables) on Sun Nov 22 00:01:15 2026
*nat
:PREROUTING ACCEPT [0:0]
-A PREROUTING -j TOLLGATE-NOT-FILTER
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:TOLLGATE-INPUT - [0:0]
:TOLLGATE-STALE - [0:0]
-A INPUT -j TOLLGATE-INPUT
-A INPUT -j KUBE-FIREWALL
-A INPUT -j TOLLGATE-INPUT
-A KUBE-FIREWALL -j TOLLGATE-INPUT
-A TOLLGATE-INPUT -i lo -j ACCEPT
-A TOLLGATE-INPUT -m comment --comment \"-j KUBE\" -j RETURN
COMMIT
";

    #[test]
    fn parses_owned_chains_and_jumps_from_builtins_only() {
        let table = Table::parse(SAVE);
        assert_eq!(
            table.chains.keys().collect::<Vec<_>>(),
            ["TOLLGATE-INPUT", "TOLLGATE-STALE"]
        );
        assert_eq!(
            table.chains["TOLLGATE-INPUT"],
            [
                "-i lo -j ACCEPT",
                "-m comment --comment \"-j KUBE\" -j RETURN"
            ]
        );
        assert!(table.chains["TOLLGATE-STALE"].is_empty());
        let jump = ("INPUT".to_string(), "-j TOLLGATE-INPUT".to_string());
        assert_eq!(table.jumps, vec![jump.clone(), jump]);
    }

    #[test]
    fn parses_owned_ipsets() {
        let save = "\
create other hash:ip family inet hashsize 1024 maxelem 65536
add other 10.9.9.9
create tollgate-endpoints-v4 hash:ip family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x1
add tollgate-endpoints-v4 10.0.0.2
add tollgate-endpoints-v4 10.0.0.1
create tollgate-endpoints-v6 hash:ip family inet6 hashsize 1024 maxelem 65536
add tollgate-endpoints-v6 fd00::1
create tollgate-fqdn-0123456789-v4 hash:ip family inet hashsize 1024 maxelem 65536 timeout 300 bucketsize 12 initval 0x9
add tollgate-fqdn-0123456789-v4 10.0.0.9 timeout 287
add tollgate-fqdn-0123456789-v4 10.0.0.8
create tollgate-fqdn-0123456789-v6 hash:ip family inet6 hashsize 1024 maxelem 65536 timeout 300
";
        let (sets, learned) = parse_ipset_save(save);
        assert_eq!(sets.len(), 2);
        assert_eq!(
            learned["tollgate-fqdn-0123456789-v4"].entries,
            vec![("10.0.0.9".parse().unwrap(), 287)]
        );
        assert_eq!(learned["tollgate-fqdn-0123456789-v6"].family, Family::V6);
        let v4 = &sets["tollgate-endpoints-v4"];
        assert_eq!(v4.family, Family::V4);
        assert_eq!(
            v4.members.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            ["10.0.0.1", "10.0.0.2"]
        );
        assert_eq!(sets["tollgate-endpoints-v6"].family, Family::V6);
    }

    /// Nothing but tollgate writes the mangle table's FORWARD on a
    /// container host: any rule above tollgate's jump there buries it,
    /// while the filter table's FORWARD jump is buried only by a runtime's.
    #[test]
    fn any_rule_above_the_mangle_forward_jump_buries_it() {
        let save = "*mangle\n:FORWARD ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n\
                    -A FORWARD -i eth9 -j ACCEPT\n-A FORWARD -j TOLLGATE-FORWARD\n\
                    -A POSTROUTING -j CALI-POSTROUTING\n-A POSTROUTING -j TOLLGATE-POSTROUTING\n\
                    COMMIT\n";
        let mangle = Table::parse_in(save, TableKind::Mangle);
        assert_eq!(
            mangle.buried,
            [("FORWARD".to_string(), "-j TOLLGATE-FORWARD".to_string())]
        );
        assert_eq!(mangle.jumps.len(), 2);
        let filter = Table::parse(&save.replace("*mangle", "*filter"));
        assert!(filter.buried.is_empty(), "{filter:?}");
    }
}
