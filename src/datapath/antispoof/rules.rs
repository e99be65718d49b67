//! The guards as kernel state: [`plan`] turns [`Guards`] into the owned
//! chains of the raw tables (iptables and ip6tables, [`CHAIN`] and
//! [`ND_CHAIN`]) and of ebtables' nat table, naming for each drop rule the
//! endpoint and [`Reason`] it counts for, and [`DropCount`] reads those
//! rules' packet counters back. Pure; it plans only DROP and RETURN.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{Attachment, Guarded, Guards, Mac, CHAIN, ND_CHAIN};
use crate::datapath::state::{counted_rule, Family, IpSet, SourceSet, State, Table};

/// The source set of a family: (source, interface) for every source a
/// routed endpoint may send from, matched by one rule (`src,src`: the
/// packet's source and incoming interface) instead of a rule each, so a
/// packet costs one lookup however many endpoints the node has.
pub fn source_set(family: Family) -> &'static str {
    match family {
        Family::V4 => "tollgate-antispoof-v4",
        Family::V6 => "tollgate-antispoof-v6",
    }
}

/// The bound set of a family (`hash:ip`): every address bound to an
/// attachment or held. A packet whose source is not in it meets no
/// `-s <address> …` drop rule.
pub fn bound_set(family: Family) -> &'static str {
    match family {
        Family::V4 => "tollgate-antispoof-bound-v4",
        Family::V6 => "tollgate-antispoof-bound-v6",
    }
}

/// Where a drop rule is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    Raw(Family),
    Bridge,
}

/// Why a drop rule drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The endpoint sent with a source (IP or MAC) not its own, or a frame
    /// of another protocol from its bridge port.
    Source,
    /// The endpoint claimed an address not its own in ARP or neighbour
    /// discovery, or sent a router advertisement or redirect.
    Neighbour,
    /// Someone else sent with the endpoint's address.
    Address,
}

impl Reason {
    pub const ALL: [Reason; 3] = [Reason::Source, Reason::Neighbour, Reason::Address];
    /// The `reason` label of each of [`Reason::ALL`], in order.
    pub const LABELS: [&'static str; 3] = ["source", "neighbour", "address"];

    pub fn label(self) -> &'static str {
        match self {
            Reason::Source => "source",
            Reason::Neighbour => "neighbour",
            Reason::Address => "address",
        }
    }
}

/// The guards as kernel state, and whom each drop rule counts for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Planned {
    pub raw_v4: Table,
    pub raw_v6: Table,
    pub bridge: Table,
    /// The source sets ([`source_set`]) the raw tables match, by name.
    pub sources: BTreeMap<String, SourceSet>,
    /// The bound sets ([`bound_set`]), by name.
    pub bound: BTreeMap<String, IpSet>,
    /// [`rule_key`] of each drop rule → (endpoint, reason).
    pub drops: BTreeMap<String, (String, Reason)>,
}

impl Planned {
    /// Puts the guards into a planned datapath state.
    pub fn install(&self, state: &mut State) {
        state.raw_v4 = self.raw_v4.clone();
        state.raw_v6 = self.raw_v6.clone();
        state.bridge = self.bridge.clone();
        state.sources.extend(self.sources.clone());
        state.sets.extend(self.bound.clone());
    }
}

/// The key of a rule in [`Planned::drops`] and a [`Reading`].
pub fn rule_key(place: Place, chain: &str, rule: &str) -> String {
    format!("{place:?} {chain} {rule}")
}

/// The guard chains for `guards` (nothing at all when there is nothing
/// to guard). Rules are spelled as `iptables-save` and `ebtables-save`
/// print them, so the installed state parses back equal.
pub fn plan(guards: &Guards) -> Planned {
    let mut planned = Planned::default();
    if guards.guarded.is_empty() && guards.held.is_empty() {
        return planned;
    }
    for family in Family::ALL {
        let (table, sets) = raw_table(guards, family, &mut planned.drops);
        if !sets.sources.entries.is_empty() {
            planned
                .sources
                .insert(source_set(family).to_string(), sets.sources);
        }
        if !sets.bound.members.is_empty() {
            planned
                .bound
                .insert(bound_set(family).to_string(), sets.bound);
        }
        match family {
            Family::V4 => planned.raw_v4 = table,
            Family::V6 => planned.raw_v6 = table,
        }
    }
    if !guards.held.is_empty()
        || guards
            .guarded
            .iter()
            .any(|g| matches!(g.attachment, Attachment::Bridged { .. }))
    {
        planned.bridge = bridge_table(guards, &mut planned.drops);
    }
    planned
}

/// The guarded endpoints by attachment, their names joined.
fn by_attachment(guards: &Guards) -> BTreeMap<&Attachment, Vec<&Guarded>> {
    let mut out: BTreeMap<&Attachment, Vec<&Guarded>> = BTreeMap::new();
    for guarded in &guards.guarded {
        out.entry(&guarded.attachment).or_default().push(guarded);
    }
    out
}

fn names(group: &[&Guarded]) -> String {
    let names: BTreeSet<&str> = group.iter().map(|g| g.endpoint.as_str()).collect();
    names.into_iter().collect::<Vec<_>>().join(",")
}

/// The sources of a group in one family: its addresses and allowed
/// prefixes, and for IPv6 link-local and the unspecified address (which
/// neighbour discovery, duplicate address detection and MLD use).
fn sources(group: &[&Guarded], family: Family) -> Vec<IpNet> {
    let mut out: BTreeSet<IpNet> = group
        .iter()
        .flat_map(|g| g.addresses.iter().map(|a| IpNet::from(*a)))
        .chain(group.iter().flat_map(|g| g.allowed.iter().copied()))
        .filter(|n| Family::of(&n.addr()) == family)
        .collect();
    if family == Family::V6 {
        out.extend(link_scoped_v6());
    }
    out.into_iter().collect()
}

/// The addresses bound to an attachment: every guarded address outside
/// the shared prefixes, with its owner.
fn bound(guards: &Guards, family: Family) -> Vec<(IpAddr, &Guarded)> {
    let mut out: Vec<(IpAddr, &Guarded)> = guards
        .guarded
        .iter()
        .flat_map(|g| g.addresses.iter().map(move |a| (*a, g)))
        .filter(|(a, _)| Family::of(a) == family)
        .filter(|(a, _)| !guards.shared.iter().any(|net| net.contains(a)))
        .collect();
    out.sort_by_key(|a| a.0);
    out
}

/// The held addresses of a family, with the endpoint each belongs to.
fn held(guards: &Guards, family: Family) -> Vec<(IpAddr, String)> {
    guards
        .held
        .iter()
        .filter(|(a, _)| Family::of(a) == family)
        .cloned()
        .collect()
}

/// The sets a family's raw table matches; an empty one is not created
/// (nor is the rule that would match it written).
struct RawSets {
    /// (source, interface) pairs that go on unchecked ([`source_set`]).
    sources: SourceSet,
    /// The bound and held addresses ([`bound_set`]).
    bound: IpSet,
}

/// A family's raw table, and the sets it matches. The source set's
/// lookup stands where each interface's `-s SOURCE -i IFACE -j RETURN`
/// rules stood, ahead of every drop rule (for IPv4 as the jump's
/// condition, for IPv6 after the neighbour discovery check): a packet
/// matched by a pair goes on as it did. It holds each routed veth's
/// sources and each bridged endpoint's own addresses with its bridge
/// (the only interface the `-s <address> ! -i <bridge>` rule lets them
/// in by). IPv6's link-local and unspecified sources, which every veth
/// may send from and no endpoint is bound to, and the prefixes shared by
/// every endpoint (`*=CIDR`), are returned by a rule each instead of a
/// pair per veth: a `hash:net,iface` set hashes the address and not the
/// interface, so one prefix with many interfaces fills a bucket (the
/// kernel refuses a 65th); for the same reason a source named for more
/// than [`INTERFACES_PER_SOURCE`] veths (a prefix allowed to that many
/// endpoints by name) is a `RETURN` rule per veth, after those above.
/// Any other packet meets the drop
/// rules (one per interface, one per bound address), whose counters say
/// whom a drop was for, unless it entered by one of the node's other
/// interfaces (the uplink, a tunnel) from a source bound to no endpoint:
/// no drop rule can match it, and a rule per such interface, with the
/// bound set's lookup, returns it ahead of them. So a packet from another
/// Node costs a few rules, however many endpoints this one has.
fn raw_table(
    guards: &Guards,
    family: Family,
    drops: &mut BTreeMap<String, (String, Reason)>,
) -> (Table, RawSets) {
    let place = Place::Raw(family);
    let mut rules = vec!["-i lo -j RETURN".to_string()];
    let groups = by_attachment(guards);
    let mut chains = BTreeMap::new();
    if family == Family::V6 {
        rules.push(format!("-p ipv6-icmp -j {ND_CHAIN}"));
        chains.insert(ND_CHAIN.to_string(), nd_rules(&groups, drops));
    }
    let mut sets = RawSets {
        sources: SourceSet {
            family,
            entries: BTreeSet::new(),
        },
        bound: IpSet {
            family,
            members: BTreeSet::new(),
        },
    };
    // Prefixes every endpoint may send from: a rule each, not a pair per
    // veth (a /0 makes every veth unchecked below instead).
    let shared: Vec<IpNet> = guards
        .shared
        .iter()
        .filter(|n| Family::of(&n.addr()) == family && n.prefix_len() > 0)
        .copied()
        .collect();
    let mut unchecked = Vec::new();
    let mut interface_drops = Vec::new();
    for (attachment, group) in &groups {
        let Attachment::Routed { interface, .. } = attachment else {
            continue;
        };
        let allowed = sources(group, family);
        // Any source (or a /0 allowed): the interface returns unchecked.
        if group.iter().any(|g| g.any_source) || allowed.iter().any(|n| n.prefix_len() == 0) {
            unchecked.push(format!("-i {interface} -j RETURN"));
            continue;
        }
        sets.sources.entries.extend(
            allowed
                .into_iter()
                .filter(|net| !link_scoped_v6().contains(net) && !shared.contains(net))
                .map(|net| (net, interface.clone())),
        );
        interface_drops.push((format!("-i {interface} -j DROP"), names(group)));
    }
    let bound = bound(guards, family);
    let held = held(guards, family);
    let held_addresses: BTreeSet<IpAddr> = held.iter().map(|(a, _)| *a).collect();
    for (address, owner) in &bound {
        if let Attachment::Bridged { bridge, .. } = &owner.attachment {
            if !held_addresses.contains(address) {
                sets.sources
                    .entries
                    .insert((IpNet::from(*address), bridge.clone()));
            }
        }
    }
    // A source named for many interfaces (one prefix allowed to many
    // endpoints by name) would fill its bucket: a rule per pair instead.
    let crowded = crowded_pairs(&mut sets.sources.entries);
    sets.bound.members = bound
        .iter()
        .map(|(a, _)| *a)
        .chain(held_addresses)
        .collect();
    // IPv4: the lookup is the jump's condition, so a packet the set returns
    // costs one rule. IPv6 checks neighbour discovery first, inside.
    let mut jump = format!("-j {CHAIN}");
    if !sets.sources.entries.is_empty() {
        let matched = format!("--match-set {} src,src", source_set(family));
        match family {
            Family::V4 => jump = format!("-m set ! {matched} {jump}"),
            Family::V6 => rules.push(format!("-m set {matched} -j RETURN")),
        }
    }
    let unbound = if sets.bound.members.is_empty() {
        String::new()
    } else {
        format!("-m set ! --match-set {} src ", bound_set(family))
    };
    if family == Family::V6 {
        for net in link_scoped_v6() {
            rules.push(format!("-s {net} -j RETURN"));
        }
    }
    // A shared prefix's unbound sources (held ones are in the bound set):
    // what the pairs of every veth returned, and nothing else could drop.
    for net in &shared {
        rules.push(format!("-s {net} {unbound}-j RETURN"));
    }
    rules.extend(unchecked);
    // From another interface with a source bound to nobody: no drop rule
    // below can match.
    for interface in &guards.others {
        rules.push(format!("-i {interface} {unbound}-j RETURN"));
    }
    for (net, interface) in crowded {
        rules.push(format!("-s {net} -i {interface} -j RETURN"));
    }
    let mut drop = |rules: &mut Vec<String>, rule: String, who: String, reason| {
        drops.insert(rule_key(place, CHAIN, &rule), (who, reason));
        rules.push(rule);
    };
    for (rule, who) in interface_drops {
        drop(&mut rules, rule, who, Reason::Source);
    }
    for (address, owner) in bound {
        let host = IpNet::from(address);
        drop(
            &mut rules,
            format!("-s {host} ! -i {} -j DROP", owner.attachment.layer3()),
            owner.endpoint.clone(),
            Reason::Address,
        );
    }
    for (address, owner) in held {
        drop(
            &mut rules,
            format!("-s {} -j DROP", IpNet::from(address)),
            owner,
            Reason::Address,
        );
    }
    chains.insert(CHAIN.to_string(), rules);
    let table = Table {
        chains,
        jumps: vec![("PREROUTING".to_string(), jump)],
        ..Table::default()
    };
    (table, sets)
}

/// Most interfaces one source is paired with in a source set. The
/// kernel hashes a `hash:net,iface` entry by its address alone, so the
/// pairs of one source share a bucket, which holds 64 entries at most;
/// half that leaves room for other sources hashed to the same bucket.
pub(super) const INTERFACES_PER_SOURCE: usize = 32;

/// Takes out of `entries` the pairs of every source paired with more than
/// [`INTERFACES_PER_SOURCE`] interfaces, and returns them: each is then a
/// `RETURN` rule of its own, ahead of the drop rules, as its lookup was.
fn crowded_pairs(entries: &mut BTreeSet<(IpNet, String)>) -> Vec<(IpNet, String)> {
    let mut per_source: BTreeMap<IpNet, usize> = BTreeMap::new();
    for (net, _) in entries.iter() {
        *per_source.entry(*net).or_default() += 1;
    }
    let crowded: Vec<(IpNet, String)> = entries
        .iter()
        .filter(|(net, _)| per_source[net] > INTERFACES_PER_SOURCE)
        .cloned()
        .collect();
    for pair in &crowded {
        entries.remove(pair);
    }
    crowded
}

/// IPv6's link-local prefix and unspecified address (neighbour
/// discovery, duplicate address detection, MLD): every interface's own,
/// bound to no endpoint. Displayed as ip6tables-save prints them.
fn link_scoped_v6() -> [IpNet; 2] {
    [
        IpNet::V6(
            ipnet::Ipv6Net::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10).expect("/10"),
        ),
        IpNet::from(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
    ]
}

/// `u32` tests that an IPv6 packet carries ICMPv6 right after its fixed
/// header, with this payload length when given.
fn icmpv6_direct(payload: Option<u16>) -> String {
    let mut test = "0x4>>0x8&0xff=0x3a".to_string();
    if let Some(length) = payload {
        test.push_str(&format!("&&0x4>>0x10={length:#x}"));
    }
    test
}

/// `u32` tests that the 16 bytes at `offset` lie in `net` (none for a /0).
fn prefix_test(offset: u32, net: &IpNet) -> String {
    let IpNet::V6(net) = net else {
        return String::new();
    };
    let octets = net.addr().octets();
    let mut tests = Vec::new();
    let mut left = u32::from(net.prefix_len());
    for word in 0..4u32 {
        if left == 0 {
            break;
        }
        let bits = left.min(32);
        left -= bits;
        let i = (word * 4) as usize;
        let value = u32::from_be_bytes([octets[i], octets[i + 1], octets[i + 2], octets[i + 3]]);
        let at = offset + word * 4;
        if bits == 32 {
            tests.push(format!("{at:#x}={value:#x}"));
        } else {
            let shift = 32 - bits;
            tests.push(format!("{at:#x}>>{shift:#x}={:#x}", value >> shift));
        }
    }
    tests.iter().map(|t| format!("&&{t}")).collect()
}

/// `u32` tests that the 8-byte link-layer address option at `offset` is
/// of `kind` (1 source, 2 target) and carries `mac`.
fn lladdr_test(offset: u32, kind: u8, mac: Mac) -> String {
    let m = mac.0;
    let first = u32::from_be_bytes([kind, 1, m[0], m[1]]);
    let second = u32::from_be_bytes([m[2], m[3], m[4], m[5]]);
    format!("&&{offset:#x}={first:#x}&&{:#x}={second:#x}", offset + 4)
}

/// The neighbour discovery chain (IPv6 raw): for each guarded veth and
/// bridge port, what its solicitations and advertisements may say.
fn nd_rules(
    groups: &BTreeMap<&Attachment, Vec<&Guarded>>,
    drops: &mut BTreeMap<String, (String, Reason)>,
) -> Vec<String> {
    let mut rules = Vec::new();
    for (attachment, group) in groups {
        if group.iter().any(|g| g.any_source) {
            continue;
        }
        let who = names(group);
        // The match on the way in, then the ICMPv6 type.
        let (head, icmp) = match attachment {
            Attachment::Routed { interface, .. } => {
                (format!("-i {interface} -p ipv6-icmp"), "-m icmp6")
            }
            Attachment::Bridged { port, .. } => (
                format!("-p ipv6-icmp -m physdev --physdev-in {port}"),
                "-m icmp6",
            ),
        };
        let of_type = |t: u8| format!("{head} {icmp} --icmpv6-type {t}");
        let mut drop = |rules: &mut Vec<String>, rule: String| {
            drops.insert(
                rule_key(Place::Raw(Family::V6), ND_CHAIN, &rule),
                (who.clone(), Reason::Neighbour),
            );
            rules.push(rule);
        };
        // Router advertisements and redirects: an endpoint is no router.
        for t in [134, 137] {
            drop(&mut rules, format!("{} -j DROP", of_type(t)));
        }
        let u32 = |tests: String| format!("-m u32 --u32 \"{tests}\" -j RETURN");
        let mac = attachment.mac();
        // Advertisements: the target is one of its sources.
        for target in sources(group, Family::V6) {
            if target.addr().is_unspecified() {
                continue;
            }
            let target_test = prefix_test(0x30, &target);
            match mac {
                Some(mac) => {
                    rules.push(format!(
                        "{} {}",
                        of_type(136),
                        u32(format!("{}{target_test}", icmpv6_direct(Some(24))))
                    ));
                    rules.push(format!(
                        "{} {}",
                        of_type(136),
                        u32(format!(
                            "{}{target_test}{}",
                            icmpv6_direct(Some(32)),
                            lladdr_test(0x40, 2, mac)
                        ))
                    ));
                }
                None => rules.push(format!(
                    "{} {}",
                    of_type(136),
                    u32(format!("{}{target_test}", icmpv6_direct(None)))
                )),
            }
        }
        drop(&mut rules, format!("{} -j DROP", of_type(136)));
        // Solicitations (neighbour, router): no option, or its own MAC
        // as the source link-layer option (or, for neighbour
        // solicitations, a duplicate address detection nonce).
        let Some(mac) = mac else {
            continue;
        };
        for (t, fixed) in [(135u8, 24u16), (133, 8)] {
            let options = 0x28 + u32::from(fixed);
            rules.push(format!(
                "{} {}",
                of_type(t),
                u32(icmpv6_direct(Some(fixed)))
            ));
            rules.push(format!(
                "{} {}",
                of_type(t),
                u32(format!(
                    "{}{}",
                    icmpv6_direct(Some(fixed + 8)),
                    lladdr_test(options, 1, mac)
                ))
            ));
            if t == 135 {
                rules.push(format!(
                    "{} {}",
                    of_type(t),
                    u32(format!(
                        "{}&&{options:#x}>>0x18=0xe",
                        icmpv6_direct(Some(fixed + 8))
                    ))
                ));
            }
            drop(&mut rules, format!("{} -j DROP", of_type(t)));
        }
    }
    rules
}

/// ebtables' spelling of a source: a host without its length.
fn ebtables_net(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

fn bridge_table(guards: &Guards, drops: &mut BTreeMap<String, (String, Reason)>) -> Table {
    let mut rules = Vec::new();
    let mut drop = |rules: &mut Vec<String>, rule: String, who: String, reason| {
        drops.insert(rule_key(Place::Bridge, CHAIN, &rule), (who, reason));
        rules.push(rule);
    };
    for (attachment, group) in by_attachment(guards) {
        let Attachment::Bridged { port, mac, .. } = attachment else {
            continue;
        };
        if group.iter().any(|g| g.any_source) {
            rules.push(format!("-i {port} -j RETURN"));
            continue;
        }
        let who = names(&group);
        let from = |protocol: &str| match mac {
            Some(mac) => format!("-p {protocol} -s {mac} -i {port}"),
            None => format!("-p {protocol} -i {port}"),
        };
        for source in sources(&group, Family::V4) {
            rules.push(format!(
                "{} --ip-src {} -j RETURN",
                from("IPv4"),
                ebtables_net(&source)
            ));
        }
        let arp_mac = mac.map_or(String::new(), |m| format!(" --arp-mac-src {m}"));
        let probe = IpNet::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        for source in sources(&group, Family::V4).iter().chain([&probe]) {
            rules.push(format!(
                "{} --arp-ip-src {}{arp_mac} -j RETURN",
                from("ARP"),
                ebtables_net(source)
            ));
        }
        for kind in ["router-advertisement", "redirect"] {
            drop(
                &mut rules,
                format!("-p IPv6 -i {port} --ip6-proto ipv6-icmp --ip6-icmp-type {kind} -j DROP"),
                who.clone(),
                Reason::Neighbour,
            );
        }
        for source in sources(&group, Family::V6) {
            rules.push(format!(
                "{} --ip6-src {} -j RETURN",
                from("IPv6"),
                ebtables_net(&source)
            ));
        }
        drop(
            &mut rules,
            format!("-p ARP -i {port} -j DROP"),
            who.clone(),
            Reason::Neighbour,
        );
        drop(
            &mut rules,
            format!("-i {port} -j DROP"),
            who,
            Reason::Source,
        );
    }
    for family in Family::ALL {
        let owners = bound(guards, family)
            .into_iter()
            .map(|(address, owner)| (address, owner.endpoint.clone()))
            .chain(held(guards, family));
        for (address, owner) in owners {
            let matches: &[&str] = match family {
                Family::V4 => &["-p IPv4 --ip-src", "-p ARP --arp-ip-src"],
                Family::V6 => &["-p IPv6 --ip6-src"],
            };
            for m in matches {
                drop(
                    &mut rules,
                    format!("{m} {address} -j DROP"),
                    owner.clone(),
                    Reason::Address,
                );
            }
        }
    }
    Table {
        chains: [(CHAIN.to_string(), rules)].into(),
        jumps: vec![("PREROUTING".to_string(), format!("-j {CHAIN}"))],
        ..Table::default()
    }
}

/// Packet counters of the guard chains' rules at one reading, by
/// [`rule_key`].
pub type Reading = BTreeMap<String, u64>;

/// The packet counter of every rule of the guard chains in `iptables-save
/// -c` or `ebtables-save -c` output (`[packets:bytes] -A CHAIN rule`).
pub fn drop_counters(save_with_counters: &str, place: Place) -> Reading {
    save_with_counters
        .lines()
        .filter_map(|line| {
            let (packets, rule) = counted_rule(line)?;
            let (chain, rule) = rule.strip_prefix("-A ")?.split_once(' ')?;
            (chain == CHAIN || chain == ND_CHAIN).then(|| (rule_key(place, chain, rule), packets))
        })
        .collect()
}

/// Counts the packets the guards dropped, per endpoint and reason, from
/// successive readings of their rules' counters (a rule counts from zero
/// when its chain is written again: the agent reads before it changes the
/// guards).
#[derive(Clone, Debug, Default)]
pub struct DropCount {
    last: Reading,
}

impl DropCount {
    /// Takes `reading`; returns what each (endpoint, reason) gained since
    /// the last one, by the drop rules of `planned`.
    pub fn gained(
        &mut self,
        reading: Reading,
        planned: &Planned,
    ) -> BTreeMap<(String, Reason), u64> {
        let mut out: BTreeMap<(String, Reason), u64> = BTreeMap::new();
        for (rule, &packets) in &reading {
            let Some((who, reason)) = planned.drops.get(rule) else {
                continue;
            };
            let gained = match self.last.get(rule) {
                Some(&before) if before <= packets => packets - before,
                _ => packets,
            };
            if gained > 0 {
                *out.entry((who.clone(), *reason)).or_default() += gained;
            }
        }
        self.last = reading;
        out
    }
}
