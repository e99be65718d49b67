//! Anti-spoofing: every endpoint whose interface the node can see may send
//! only from its own addresses and claim only them in ARP and neighbour
//! discovery, and nobody else may send from them (issue 27, finding 3).
//! Pure: [`endpoints`] reads the inventory, [`attach`] maps endpoints and
//! the node's interface facts (read by `agent::links`) to where each one
//! is attached, [`plan`] turns that into the owned chains of the raw
//! tables and of ebtables' nat table, and [`DropCount`] turns the drop
//! rules' packet counters into drops per endpoint. It never runs a command
//! nor reads the clock, and never plans anything but DROP and RETURN: a
//! guard can only take packets away, never let one through that the rest
//! of the datapath would stop.
//!
//! # Where each check runs
//!
//! - A **routed veth** (the CNI's host side, the interface the node's
//!   route to the endpoint leaves by): the raw table's `PREROUTING`, before
//!   conntrack, jumps to [`CHAIN`]: `-s <own> -i <veth> -j RETURN` for each
//!   of its sources (its addresses, its allowed prefixes, IPv6 link-local
//!   and `::`), then `-i <veth> -j DROP`.
//! - A **Linux bridge port** (Docker's and podman's networks, bridge CNIs):
//!   ebtables' nat `PREROUTING` (the bridge family's first hook: every frame
//!   a port sends, before the bridge forwards it and before `br_netfilter`
//!   hands it to iptables) jumps to [`CHAIN`]: IPv4, IPv6 and ARP frames
//!   from the port RETURN only with the endpoint's MAC as source and one of
//!   its sources as IP source or ARP sender; router advertisements and
//!   redirects, frames of other protocols and the rest are dropped. The
//!   raw table cannot do this: bridged packets reach it only through
//!   `br_netfilter`, never as ARP, and with the bridge as `-i`.
//! - **Its addresses elsewhere**: a packet with an endpoint's address as
//!   source that enters by another interface (raw: `-s <addr> ! -i <its
//!   veth or bridge> -j DROP`) or another bridge port (ebtables: IP source
//!   or ARP sender) is dropped too, whoever sent it.
//! - **Neighbour discovery** (raw, IPv6, [`ND_CHAIN`]): a neighbour
//!   advertisement from a guarded veth (`-i`) or bridge port (`-m physdev
//!   --physdev-in`, seen only with `br_netfilter`) must have ICMPv6 right
//!   after the fixed header and a target among its sources or link-local;
//!   where its MAC is known, a solicitation's, advertisement's or router
//!   solicitation's link-layer option must be its MAC; router
//!   advertisements and redirects are dropped.
//!
//! An endpoint listed with an allowed prefix may also send from it; one
//! allowed any source has its interface returned unchecked, its own
//! addresses still bound to it. Addresses in a prefix allowed to every
//! endpoint (`*=CIDR`) are bound to nobody.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::config::{AllowedSource, SourceEndpoint};
use crate::model::{Object, Snapshot};

use super::state::{Family, Table};

/// The owned chain of the raw tables (from `PREROUTING`) and of ebtables'
/// nat table (from its `PREROUTING`).
pub const CHAIN: &str = "TOLLGATE-ANTISPOOF";
/// The owned chain of the IPv6 raw table that checks neighbour discovery.
pub const ND_CHAIN: &str = "TOLLGATE-ANTISPOOF-ND";
/// The Pod annotation naming an endpoint's interface, read in files mode
/// only (in Kubernetes mode a Pod's owner writes its annotations).
pub const INTERFACE_ANNOTATION: &str = "tollgate.io/interface";

/// A MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    /// As ebtables-save prints it: `0a:00:00:00:00:01`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// A local endpoint as the guards see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub namespace: String,
    pub name: String,
    pub addresses: Vec<IpAddr>,
    /// The interface the inventory names for it ([`INTERFACE_ANNOTATION`]).
    pub interface: Option<String>,
}

impl Endpoint {
    fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The local Pods of `snapshot` (scheduled on `node`, or on no Node) with
/// an address; the interface annotation is read when `named_interfaces`.
pub fn endpoints(snapshot: &Snapshot, node: &str, named_interfaces: bool) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = snapshot
        .iter()
        .filter_map(|object| match object {
            Object::Pod(pod) => Some(pod),
            _ => None,
        })
        .filter(|pod| {
            pod.spec
                .node_name
                .as_deref()
                .is_none_or(|n| n.is_empty() || n == node)
        })
        .map(|pod| Endpoint {
            namespace: pod.namespace().to_string(),
            name: pod.metadata.name.clone(),
            addresses: pod.ips(),
            interface: named_interfaces
                .then(|| pod.metadata.annotations.get(INTERFACE_ANNOTATION).cloned())
                .flatten(),
        })
        .filter(|e| !e.addresses.is_empty())
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out.dedup_by(|a, b| a.namespace == b.namespace && a.name == b.name);
    out
}

/// One interface of the node's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `IFLA_INFO_KIND`: `veth`, `bridge`, …; `None` for a plain device.
    pub kind: Option<String>,
    /// The bridge it is a port of.
    pub master: Option<u32>,
    /// The other end of a veth pair in another namespace, as read there.
    pub peer: Option<Peer>,
}

/// What the far end of a veth holds in its own namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    pub mac: Option<Mac>,
    pub addresses: Vec<IpAddr>,
}

/// What the node knows about its interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub links: Vec<Link>,
    /// The output interface of the node's route to each endpoint address
    /// (`ip route get`); `None`: no route.
    pub routes: BTreeMap<IpAddr, Option<u32>>,
    /// Whether bridge ports can be guarded (`ebtables-nft` installed).
    pub bridge_guards: bool,
}

/// Where an endpoint's packets enter the node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attachment {
    /// Its own interface (a veth whose far end it holds).
    Routed { interface: String, mac: Option<Mac> },
    /// A port of a Linux bridge.
    Bridged {
        bridge: String,
        port: String,
        mac: Option<Mac>,
    },
}

impl Attachment {
    /// The interface its routed packets enter by (`-i`).
    fn layer3(&self) -> &str {
        match self {
            Attachment::Routed { interface, .. } => interface,
            Attachment::Bridged { bridge, .. } => bridge,
        }
    }

    fn mac(&self) -> Option<Mac> {
        match self {
            Attachment::Routed { mac, .. } | Attachment::Bridged { mac, .. } => *mac,
        }
    }
}

impl fmt::Display for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attachment::Routed { interface, .. } => write!(f, "{interface}"),
            Attachment::Bridged { bridge, port, .. } => write!(f, "{bridge} port {port}"),
        }
    }
}

/// An endpoint's addresses bound to where they enter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guarded {
    /// `namespace/name`.
    pub endpoint: String,
    pub attachment: Attachment,
    pub addresses: Vec<IpAddr>,
    /// Prefixes it may also send from (`antiSpoofing.allowedSourcePrefixes`).
    pub allowed: Vec<IpNet>,
    /// Allowed any source: its interface is not checked.
    pub any_source: bool,
}

/// An endpoint (or some of its addresses) left unguarded, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unguarded {
    pub endpoint: String,
    pub reason: String,
}

/// What [`attach`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guards {
    pub guarded: Vec<Guarded>,
    pub unguarded: Vec<Unguarded>,
    /// Addresses that several bridge ports hold at their far end with no
    /// earlier binding to tell the endpoint's own: nobody may send from
    /// them (the endpoint's owner, its own included, until the other
    /// lets it go), with the endpoint they belong to.
    pub held: Vec<(IpAddr, String)>,
    /// Prefixes every endpoint may send from: addresses in them are bound
    /// to nobody.
    pub shared: Vec<IpNet>,
}

/// Where each endpoint is attached, from the node's interfaces and routes:
/// the interface the inventory names, else the route's output interface
/// for each address — a veth is the endpoint's own; for a bridge, the
/// port whose veth peer holds the address. Anything else (no route, the
/// node's own address, an uplink, a port nobody holds it at) leaves the
/// address unguarded, with the reason. The far end of a port is the
/// endpoint's to configure: one that adds its neighbour's address there
/// does not move the neighbour's binding (`previous`, the last guards,
/// keeps it on its port while that port still holds it), and an address
/// several ports hold with no earlier binding is held: dropped from every
/// port.
pub fn attach(
    endpoints: &[Endpoint],
    facts: &Facts,
    allowed: &[AllowedSource],
    previous: &Guards,
) -> Guards {
    let shared: Vec<IpNet> = allowed
        .iter()
        .filter(|a| a.endpoint == SourceEndpoint::Any)
        .filter_map(|a| a.cidr)
        .collect();
    let mut owners: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for endpoint in endpoints {
        for address in endpoint.addresses.iter().collect::<BTreeSet<_>>() {
            *owners.entry(*address).or_default() += 1;
        }
    }
    let mut guards = Guards {
        shared,
        ..Guards::default()
    };
    for endpoint in endpoints {
        let id = endpoint.id();
        let mine: Vec<&AllowedSource> = allowed
            .iter()
            .filter(|a| a.endpoint.covers(&endpoint.namespace, &endpoint.name))
            .collect();
        let mut placed: BTreeMap<Attachment, Vec<IpAddr>> = BTreeMap::new();
        let named = endpoint
            .interface
            .as_ref()
            .map(|name| named_attachment(name, endpoint, facts));
        for &address in &endpoint.addresses {
            if link_local(address) {
                continue;
            }
            let found = if owners.get(&address).copied().unwrap_or(0) > 1 {
                Err(Unplaced::Reason(format!(
                    "{address} belongs to more than one endpoint"
                )))
            } else {
                match &named {
                    Some(found) => found.clone().map_err(Unplaced::Reason),
                    None => routed_attachment(address, facts, previous),
                }
            };
            match found {
                Ok(attachment) => placed.entry(attachment).or_default().push(address),
                Err(Unplaced::Reason(reason)) => guards.unguarded.push(Unguarded {
                    endpoint: id.clone(),
                    reason,
                }),
                Err(Unplaced::Held(reason)) => {
                    guards.held.push((address, id.clone()));
                    guards.unguarded.push(Unguarded {
                        endpoint: id.clone(),
                        reason,
                    });
                }
            }
        }
        for (attachment, addresses) in placed {
            if !facts.bridge_guards && matches!(attachment, Attachment::Bridged { .. }) {
                guards.unguarded.push(Unguarded {
                    endpoint: id.clone(),
                    reason: format!(
                        "{attachment}: guarding bridge ports needs ebtables-nft (Debian's iptables package)"
                    ),
                });
                continue;
            }
            guards.guarded.push(Guarded {
                endpoint: id.clone(),
                attachment,
                addresses,
                allowed: mine.iter().filter_map(|a| a.cidr).collect(),
                any_source: mine.iter().any(|a| a.cidr.is_none()),
            });
        }
    }
    guards
}

/// Why an address has no attachment.
enum Unplaced {
    Reason(String),
    /// Several bridge ports hold it: nobody may send from it.
    Held(String),
}

fn link_local(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80 || v6.is_unspecified(),
    }
}

fn link_named<'a>(facts: &'a Facts, name: &str) -> Option<&'a Link> {
    facts.links.iter().find(|l| l.name == name)
}

fn link_indexed(facts: &Facts, index: u32) -> Option<&Link> {
    facts.links.iter().find(|l| l.index == index)
}

/// The attachment of an endpoint whose interface the inventory names.
fn named_attachment(name: &str, endpoint: &Endpoint, facts: &Facts) -> Result<Attachment, String> {
    let link = link_named(facts, name)
        .ok_or_else(|| format!("interface {name} (named by the inventory) does not exist"))?;
    if link.kind.as_deref() == Some("bridge") {
        let address = endpoint
            .addresses
            .iter()
            .copied()
            .find(|a| !link_local(*a))
            .ok_or_else(|| format!("no address to find its port of bridge {name} by"))?;
        return bridge_port(link, address, facts, &Guards::default()).map_err(|e| match e {
            Unplaced::Reason(reason) | Unplaced::Held(reason) => reason,
        });
    }
    Ok(attachment_of(link, facts))
}

/// A link that is not a bridge: a bridge port, or an interface of its own.
fn attachment_of(link: &Link, facts: &Facts) -> Attachment {
    let mac = link.peer.as_ref().and_then(|p| p.mac);
    match link.master.and_then(|m| link_indexed(facts, m)) {
        Some(bridge) => Attachment::Bridged {
            bridge: bridge.name.clone(),
            port: link.name.clone(),
            mac,
        },
        None => Attachment::Routed {
            interface: link.name.clone(),
            mac,
        },
    }
}

/// The attachment of an address by the node's route to it.
fn routed_attachment(
    address: IpAddr,
    facts: &Facts,
    previous: &Guards,
) -> Result<Attachment, Unplaced> {
    let reason = |text: String| Unplaced::Reason(text);
    let index = facts
        .routes
        .get(&address)
        .copied()
        .flatten()
        .ok_or_else(|| reason(format!("the node has no route to {address}")))?;
    let link = link_indexed(facts, index).ok_or_else(|| {
        reason(format!(
            "the route to {address} leaves by an unknown interface"
        ))
    })?;
    match link.kind.as_deref() {
        _ if link.name == "lo" => Err(reason(format!(
            "{address} is the node's own address (host network)"
        ))),
        Some("bridge") => bridge_port(link, address, facts, previous),
        Some("veth") => Ok(attachment_of(link, facts)),
        kind => Err(reason(format!(
            "the route to {address} leaves by {} ({}), not a veth or bridge of the endpoint's own",
            link.name,
            kind.unwrap_or("a device")
        ))),
    }
}

/// The port of `bridge` whose veth peer holds `address` (of several, the
/// one `previous` bound it to).
fn bridge_port(
    bridge: &Link,
    address: IpAddr,
    facts: &Facts,
    previous: &Guards,
) -> Result<Attachment, Unplaced> {
    let ports: Vec<&Link> = facts
        .links
        .iter()
        .filter(|l| l.master == Some(bridge.index))
        .filter(|l| {
            l.peer
                .as_ref()
                .is_some_and(|p| p.addresses.contains(&address))
        })
        .collect();
    match ports.as_slice() {
        [port] => Ok(Attachment::Bridged {
            bridge: bridge.name.clone(),
            port: port.name.clone(),
            mac: port.peer.as_ref().and_then(|p| p.mac),
        }),
        [] => Err(Unplaced::Reason(format!(
            "no port of bridge {} holds {address} at its far end",
            bridge.name
        ))),
        many => {
            let bound = previous.guarded.iter().find_map(|g| match &g.attachment {
                Attachment::Bridged {
                    bridge: b, port, ..
                } if *b == bridge.name && g.addresses.contains(&address) => Some(port),
                _ => None,
            });
            if let Some(port) = many.iter().find(|p| Some(&p.name) == bound) {
                return Ok(Attachment::Bridged {
                    bridge: bridge.name.clone(),
                    port: port.name.clone(),
                    mac: port.peer.as_ref().and_then(|p| p.mac),
                });
            }
            Err(Unplaced::Held(format!(
                "ports {} of bridge {} all hold {address}: it is dropped from every port until one lets it go",
                many.iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                bridge.name
            )))
        }
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
    /// [`rule_key`] of each drop rule → (endpoint, reason).
    pub drops: BTreeMap<String, (String, Reason)>,
}

impl Planned {
    /// Puts the guards into a planned datapath state.
    pub fn install(&self, state: &mut super::State) {
        state.raw_v4 = self.raw_v4.clone();
        state.raw_v6 = self.raw_v6.clone();
        state.bridge = self.bridge.clone();
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
        let table = raw_table(guards, family, &mut planned.drops);
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
        out.insert(IpNet::V6(
            ipnet::Ipv6Net::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10).expect("/10"),
        ));
        out.insert(IpNet::from(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
    }
    out.into_iter().collect()
}

/// `-s NET` as iptables-save prints it (nothing for a /0).
fn iptables_source(net: &IpNet) -> String {
    match net.prefix_len() {
        0 => String::new(),
        _ => format!("-s {net} "),
    }
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

fn raw_table(
    guards: &Guards,
    family: Family,
    drops: &mut BTreeMap<String, (String, Reason)>,
) -> Table {
    let place = Place::Raw(family);
    let mut rules = vec!["-i lo -j RETURN".to_string()];
    let groups = by_attachment(guards);
    let mut chains = BTreeMap::new();
    if family == Family::V6 {
        rules.push(format!("-p ipv6-icmp -j {ND_CHAIN}"));
        chains.insert(ND_CHAIN.to_string(), nd_rules(&groups, drops));
    }
    let mut drop = |rules: &mut Vec<String>, rule: String, who: String, reason| {
        drops.insert(rule_key(place, CHAIN, &rule), (who, reason));
        rules.push(rule);
    };
    for (attachment, group) in &groups {
        let Attachment::Routed { interface, .. } = attachment else {
            continue;
        };
        if group.iter().any(|g| g.any_source) {
            rules.push(format!("-i {interface} -j RETURN"));
            continue;
        }
        for source in sources(group, family) {
            rules.push(format!(
                "{}-i {interface} -j RETURN",
                iptables_source(&source)
            ));
        }
        drop(
            &mut rules,
            format!("-i {interface} -j DROP"),
            names(group),
            Reason::Source,
        );
    }
    for (address, owner) in bound(guards, family) {
        let host = IpNet::from(address);
        drop(
            &mut rules,
            format!("-s {host} ! -i {} -j DROP", owner.attachment.layer3()),
            owner.endpoint.clone(),
            Reason::Address,
        );
    }
    for (address, owner) in held(guards, family) {
        drop(
            &mut rules,
            format!("-s {} -j DROP", IpNet::from(address)),
            owner,
            Reason::Address,
        );
    }
    chains.insert(CHAIN.to_string(), rules);
    Table {
        chains,
        jumps: vec![("PREROUTING".to_string(), format!("-j {CHAIN}"))],
        ..Table::default()
    }
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
            let (packets, rest) = line.strip_prefix('[')?.split_once(':')?;
            let (_, rule) = rest.split_once("] -A ")?;
            let (chain, rule) = rule.split_once(' ')?;
            (chain == CHAIN || chain == ND_CHAIN)
                .then(|| (rule_key(place, chain, rule), packets.parse::<u64>().ok()))
        })
        .filter_map(|(key, packets)| Some((key, packets?)))
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

#[cfg(test)]
mod tests;
