//! The transport side of a review: the protocols a flow can have and,
//! per protocol, the two fields rules read (destination and source port;
//! ICMP type and code; IGMP type and group), cut into the intervals the
//! rules at hand cannot tell apart. An [`Atom`] is one protocol and one
//! interval of each field; its first values make the transport of the
//! flow that stands for it. How atoms are written in a report is here too.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::model::PortProtocol;
use crate::packet::flow::Transport;
use crate::ruleset::FieldRange;

/// A flow's protocol as a review reports it; `IP` is every other IP
/// protocol (rules with `ports` or `protocols` never match it, rules
/// without match it as they match every protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Igmp,
    Ip,
}

impl Protocol {
    pub const ALL: [Protocol; 6] = [
        Protocol::Tcp,
        Protocol::Udp,
        Protocol::Sctp,
        Protocol::Icmp,
        Protocol::Igmp,
        Protocol::Ip,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
            Protocol::Icmp => "ICMP",
            Protocol::Igmp => "IGMP",
            Protocol::Ip => "IP",
        }
    }

    /// Whether flows of the family can have this protocol (IGMP is IPv4
    /// only).
    pub fn in_family(self, v6: bool) -> bool {
        !(v6 && self == Protocol::Igmp)
    }

    fn of_port(protocol: PortProtocol) -> Protocol {
        match protocol {
            PortProtocol::Tcp => Protocol::Tcp,
            PortProtocol::Udp => Protocol::Udp,
            PortProtocol::Sctp => Protocol::Sctp,
        }
    }

    /// The whole of each field: ports 1-65535 (port 0 is no port), ICMP
    /// types and codes 0-255, IGMP types 0-255 and every group.
    pub(crate) fn domain(self) -> [(u32, u32); 2] {
        match self {
            Protocol::Tcp | Protocol::Udp | Protocol::Sctp => [(1, 65535), (1, 65535)],
            Protocol::Icmp => [(0, 255), (0, 255)],
            Protocol::Igmp => [(0, 255), (0, u32::MAX)],
            Protocol::Ip => [(0, 0), (0, 0)],
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An inclusive interval of one field.
type Interval = (u32, u32);

/// The IP protocol number standing for [`Protocol::Ip`] (GRE).
const OTHER_PROTOCOL: u8 = 47;

/// One protocol and an interval of each of its two fields (inclusive):
/// destination and source port, ICMP type and code, IGMP type and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Atom {
    pub protocol: Protocol,
    pub a: (u32, u32),
    pub b: (u32, u32),
}

impl Atom {
    /// The transport of the flow standing for the atom: its first values.
    pub fn transport(&self) -> Transport {
        let (a, b) = (self.a.0, self.b.0);
        let port = |n: u32| n as u16;
        match self.protocol {
            Protocol::Tcp => Transport::Tcp {
                src_port: port(b),
                dst_port: port(a),
            },
            Protocol::Udp => Transport::Udp {
                src_port: port(b),
                dst_port: port(a),
            },
            Protocol::Sctp => Transport::Sctp {
                src_port: port(b),
                dst_port: port(a),
            },
            Protocol::Icmp => Transport::Icmp {
                icmp_type: a as u8,
                icmp_code: b as u8,
            },
            Protocol::Igmp => Transport::Igmp {
                igmp_type: a as u8,
                group: Ipv4Addr::from(b),
            },
            Protocol::Ip => Transport::Other {
                number: OTHER_PROTOCOL,
            },
        }
    }

    /// Whether `other`'s values all lie within this atom.
    pub fn holds(&self, other: &Atom) -> bool {
        self.protocol == other.protocol
            && self.a.0 <= other.a.0
            && other.a.1 <= self.a.1
            && self.b.0 <= other.b.0
            && other.b.1 <= self.b.1
    }
}

/// Where the rules at hand cut each field of each protocol: the first
/// value of every interval.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cuts {
    starts: [[BTreeSet<u32>; 2]; 6],
}

impl Cuts {
    /// Cuts the field `range` reads at its ends.
    pub fn add(&mut self, range: FieldRange) {
        let (protocol, field, lo, hi) = match range {
            FieldRange::DstPort(p, lo, hi) => (Protocol::of_port(p), 0, lo.into(), hi.into()),
            FieldRange::SrcPort(p, lo, hi) => (Protocol::of_port(p), 1, lo.into(), hi.into()),
            FieldRange::IcmpType(t) => (Protocol::Icmp, 0, t.into(), t.into()),
            FieldRange::IcmpCode(c) => (Protocol::Icmp, 1, c.into(), c.into()),
            FieldRange::IgmpType(t) => (Protocol::Igmp, 0, t.into(), t.into()),
            FieldRange::IgmpGroup(g) => (Protocol::Igmp, 1, u32::from(g), u32::from(g)),
        };
        let (min, max) = protocol.domain()[field];
        let starts = &mut self.starts[protocol.index()][field];
        let lo: u32 = lo;
        let hi: u32 = hi;
        if lo > max || hi < min || lo > hi {
            return;
        }
        starts.insert(lo.max(min));
        if hi < max {
            starts.insert(hi + 1);
        }
    }

    /// Every atom of the family's protocols: each protocol's fields cut
    /// at every start, in order.
    pub fn atoms(&self, v6: bool) -> Vec<Atom> {
        let mut out = Vec::new();
        for protocol in Protocol::ALL.into_iter().filter(|p| p.in_family(v6)) {
            let [a, b] = [0, 1].map(|field| {
                intervals(
                    protocol.domain()[field],
                    &self.starts[protocol.index()][field],
                )
            });
            for &a in &a {
                for &b in &b {
                    out.push(Atom { protocol, a, b });
                }
            }
        }
        out
    }
}

/// `domain` cut at `starts` (each in the domain).
fn intervals((min, max): (u32, u32), starts: &BTreeSet<u32>) -> Vec<(u32, u32)> {
    let mut points: Vec<u32> = std::iter::once(min)
        .chain(starts.iter().copied().filter(|&s| s > min && s <= max))
        .collect();
    points.dedup();
    points
        .iter()
        .enumerate()
        .map(|(i, &lo)| (lo, points.get(i + 1).map_or(max, |next| next - 1)))
        .collect()
}

/// An interval as a report writes it: `80`, `8000-8080`.
pub(crate) fn interval_text((lo, hi): (u32, u32)) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

/// Merges touching intervals (sorted first).
pub(crate) fn merge_intervals(mut list: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    list.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (lo, hi) in list {
        match out.last_mut() {
            Some(last) if last.1.checked_add(1).is_some_and(|n| n >= lo) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// What a set of atoms of one protocol covers, as a report writes it:
/// the `ports` (destination ports; ICMP `type T code C`; IGMP `type T
/// group G`; nothing for `IP`) and the `sourcePorts` (empty when any),
/// one entry per distinct source-port interval set.
pub(crate) fn describe(protocol: Protocol, atoms: &[Atom]) -> Vec<(Vec<String>, Vec<String>)> {
    let [_, b_domain] = protocol.domain();
    // Group the first field's intervals by the second's.
    let mut by_b: Vec<(Interval, Vec<Interval>)> = Vec::new();
    for atom in atoms {
        match by_b.iter_mut().find(|(b, _)| *b == atom.b) {
            Some((_, list)) => list.push(atom.a),
            None => by_b.push((atom.b, vec![atom.a])),
        }
    }
    // Then second-field intervals with the same first-field set.
    let mut by_a: Vec<(Vec<Interval>, Vec<Interval>)> = Vec::new();
    for (b, a) in by_b {
        let a = merge_intervals(a);
        match by_a.iter_mut().find(|(list, _)| *list == a) {
            Some((_, bs)) => bs.push(b),
            None => by_a.push((a, vec![b])),
        }
    }
    let mut out = Vec::new();
    for (a, b) in by_a {
        let b = merge_intervals(b);
        let any_b = b == [b_domain];
        match protocol {
            Protocol::Tcp | Protocol::Udp | Protocol::Sctp => {
                let sources = if any_b {
                    Vec::new()
                } else {
                    b.iter().copied().map(interval_text).collect()
                };
                out.push((a.into_iter().map(interval_text).collect(), sources));
            }
            Protocol::Icmp | Protocol::Igmp => {
                let [a_domain, _] = protocol.domain();
                let mut ports = Vec::new();
                for &types in &a {
                    let kind = if types == a_domain {
                        String::new()
                    } else {
                        format!("type {}", interval_text(types))
                    };
                    if any_b {
                        ports.push(if kind.is_empty() { "any".into() } else { kind });
                        continue;
                    }
                    for &second in &b {
                        let second = if protocol == Protocol::Icmp {
                            format!("code {}", interval_text(second))
                        } else {
                            format!("group {}", group_text(second))
                        };
                        ports.push(if kind.is_empty() {
                            second
                        } else {
                            format!("{kind} {second}")
                        });
                    }
                }
                out.push((ports, Vec::new()));
            }
            Protocol::Ip => out.push((Vec::new(), Vec::new())),
        }
    }
    out
}

fn group_text((lo, hi): (u32, u32)) -> String {
    if lo == hi {
        Ipv4Addr::from(lo).to_string()
    } else {
        format!("{}-{}", Ipv4Addr::from(lo), Ipv4Addr::from(hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_range_cuts_its_protocol_only() {
        let mut cuts = Cuts::default();
        cuts.add(FieldRange::DstPort(PortProtocol::Tcp, 80, 90));
        let tcp: Vec<_> = cuts
            .atoms(false)
            .into_iter()
            .filter(|a| a.protocol == Protocol::Tcp)
            .map(|a| a.a)
            .collect();
        assert_eq!(tcp, [(1, 79), (80, 90), (91, 65535)]);
        assert_eq!(cuts.atoms(false).len(), 3 + 5);
        assert_eq!(cuts.atoms(true).len(), 3 + 4, "no IGMP over IPv6");
    }

    #[test]
    fn ranges_at_the_ends_of_the_domain_cut_once() {
        let mut cuts = Cuts::default();
        cuts.add(FieldRange::DstPort(PortProtocol::Udp, 1, 65535));
        cuts.add(FieldRange::DstPort(PortProtocol::Udp, 0, 5));
        let udp: Vec<_> = cuts
            .atoms(false)
            .into_iter()
            .filter(|a| a.protocol == Protocol::Udp)
            .map(|a| a.a)
            .collect();
        assert_eq!(udp, [(1, 5), (6, 65535)]);
    }

    #[test]
    fn atoms_are_described_by_their_ports_and_source_ports() {
        let atom = |a, b| Atom {
            protocol: Protocol::Tcp,
            a,
            b,
        };
        let whole = (1, 65535);
        assert_eq!(
            describe(
                Protocol::Tcp,
                &[atom((80, 80), whole), atom((81, 90), whole)]
            ),
            [(vec!["80-90".to_string()], vec![])]
        );
        assert_eq!(
            describe(Protocol::Tcp, &[atom((80, 80), (1000, 2000))]),
            [(vec!["80".to_string()], vec!["1000-2000".to_string()])]
        );
        let icmp = |a, b| Atom {
            protocol: Protocol::Icmp,
            a,
            b,
        };
        assert_eq!(
            describe(Protocol::Icmp, &[icmp((8, 8), (0, 255))])[0].0,
            ["type 8"]
        );
        assert_eq!(
            describe(Protocol::Icmp, &[icmp((0, 255), (0, 255))])[0].0,
            ["any"]
        );
        assert_eq!(
            describe(Protocol::Icmp, &[icmp((8, 8), (0, 0))])[0].0,
            ["type 8 code 0"]
        );
    }
}
