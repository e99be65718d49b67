//! Anti-spoofing: every endpoint whose interface the node can see may send
//! only from its own addresses and claim only them in ARP and neighbour
//! discovery, and nobody else may send from them (issue 27, finding 3).
//! Pure: [`endpoints`] reads the inventory, [`attach`] maps endpoints and
//! the node's interface facts (read by `agent::links`) to where each one
//! is attached (this file), [`plan`] turns that into the owned chains of
//! the raw tables and of ebtables' nat table, and [`DropCount`] turns the
//! drop rules' packet counters into drops per endpoint (`rules`). It never runs a command
//! nor reads the clock, and never plans anything but DROP and RETURN: a
//! guard can only take packets away, never let one through that the rest
//! of the datapath would stop.
//!
//! # Where each check runs
//!
//! - A **routed veth** (the CNI's host side, the interface the node's
//!   route to the endpoint leaves by): the raw table's `PREROUTING`, before
//!   conntrack, lets a packet whose (source, incoming interface) is in the
//!   family's source set ([`source_set`], `hash:net,iface`: each veth with
//!   each of its sources — its addresses, its allowed prefixes, IPv6
//!   link-local and `::`) go on, so every packet costs one lookup however
//!   many endpoints there are. For IPv4 the lookup is the condition of the
//!   jump to [`CHAIN`] (`-m set ! --match-set … -j`), one rule a packet;
//!   for IPv6 the jump is unconditional and the lookup is a `RETURN` rule
//!   of the chain, after the neighbour discovery check below, which every
//!   ICMPv6 packet must meet. A packet from a veth that the set did not
//!   return meets `-i <veth> -j DROP`. The set also holds each bridged
//!   endpoint's addresses with its bridge, the one interface they may
//!   enter the raw table by.
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
//! - **Everyone else** (the uplink's packets, a tunnel's, another Node's
//!   Pods'): in the raw table, a packet that entered by one of the node's
//!   other interfaces ([`Guards::others`]: not a guarded veth, not a
//!   bridge port) with a source bound to no endpoint (the `hash:ip` set
//!   [`bound_set`]) can match none of the drop rules, and a rule per such
//!   interface returns it ahead of them: a few rules a packet, however
//!   many endpoints the node has. The drop rules stay one per interface
//!   and address, so that their counters say whom each drop was for.
//! - **Sources every veth may use** (IPv6 link-local and `::`, prefixes
//!   allowed to every endpoint): a rule each, not a pair per veth in the
//!   source set, whose hash ignores the interface: the kernel refuses a
//!   65th interface for one prefix. A prefix allowed by name to more
//!   than [`rules::INTERFACES_PER_SOURCE`] endpoints is likewise a rule
//!   per veth.
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
use std::net::IpAddr;

use ipnet::IpNet;

use crate::config::{AllowedSource, SourceEndpoint};
use crate::model::{Object, Snapshot};

mod rules;

pub use rules::{
    bound_set, drop_counters, plan, rule_key, source_set, DropCount, Place, Planned, Reading,
    Reason,
};

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
    /// The node's other interfaces that packets enter the raw table by
    /// (the uplink, tunnels, bridges, veths of no endpoint; not loopback,
    /// not a bridge's ports, not a guarded veth): a packet from one can
    /// only meet the address drop rules. Names iptables could read as a
    /// pattern (`+`) or an option are left out.
    pub others: Vec<String>,
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
    let routed: BTreeSet<&str> = guards
        .guarded
        .iter()
        .filter_map(|g| match &g.attachment {
            Attachment::Routed { interface, .. } => Some(interface.as_str()),
            Attachment::Bridged { .. } => None,
        })
        .collect();
    guards.others = facts
        .links
        .iter()
        .filter(|l| l.name != "lo" && l.master.is_none() && !routed.contains(l.name.as_str()))
        .filter(|l| plain_name(&l.name))
        .map(|l| l.name.clone())
        .collect();
    guards.others.sort();
    guards.others.dedup();
    guards
}

/// Whether iptables reads `-i NAME` as exactly this interface: no
/// wildcard (`+`), nothing an option could start with.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['-', '!'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
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

#[cfg(test)]
mod tests;
