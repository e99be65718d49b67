//! `tollgate get matrix`: who can reach whom, endpoint by endpoint (or
//! group by group) and port by port, every cell decided by the side's
//! [`Side::decide`] — the classifier — for every pair of addresses of a
//! common family. A group's cell, or a dual-stack pair's, whose flows are
//! not all decided alike says so (`~`) rather than pick one.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::side::Side;
use crate::fqdn::NoFqdn;
use crate::model::PortProtocol;
use crate::packet::flow::{Flow, Transport, Verdict};
use crate::ruleset::ServiceMatch;

/// A column of the matrix: a port number or a named container port of
/// the destination, of a protocol; or ICMP echo.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MatrixPort {
    Number(PortProtocol, u16),
    Named(PortProtocol, String),
    /// ICMP (ICMPv6) echo request.
    Icmp,
}

impl FromStr for MatrixPort {
    type Err = String;

    /// `80` (TCP), `53/udp`, `http` (a named port, TCP), `dns/udp`,
    /// `icmp`.
    fn from_str(text: &str) -> Result<MatrixPort, String> {
        if text.eq_ignore_ascii_case("icmp") {
            return Ok(MatrixPort::Icmp);
        }
        let (port, protocol) = match text.rsplit_once('/') {
            Some((port, protocol)) => {
                let protocol = match protocol.to_ascii_lowercase().as_str() {
                    "tcp" => PortProtocol::Tcp,
                    "udp" => PortProtocol::Udp,
                    "sctp" => PortProtocol::Sctp,
                    _ => return Err(format!("{text:?}: the protocol is tcp, udp or sctp")),
                };
                (port, protocol)
            }
            None => (text, PortProtocol::Tcp),
        };
        match port.parse::<u16>() {
            Ok(0) => Err(format!("{text:?}: port 0 is no port")),
            Ok(n) => Ok(MatrixPort::Number(protocol, n)),
            Err(_) if !port.is_empty() && !port.contains(char::is_whitespace) => {
                Ok(MatrixPort::Named(protocol, port.to_string()))
            }
            Err(_) => Err(format!("{text:?}: a port is a number or a port name")),
        }
    }
}

impl fmt::Display for MatrixPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |p: &PortProtocol| match p {
            PortProtocol::Tcp => "TCP",
            PortProtocol::Udp => "UDP",
            PortProtocol::Sctp => "SCTP",
        };
        match self {
            MatrixPort::Number(p, n) => write!(f, "{}/{n}", name(p)),
            MatrixPort::Named(p, n) => write!(f, "{}/{n}", name(p)),
            MatrixPort::Icmp => f.write_str("ICMP"),
        }
    }
}

/// One port's verdict in a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mark {
    Allow,
    Drop,
    Reject,
    /// Allowed subject to L7 rules (each request is decided on the wire).
    #[serde(rename = "L7")]
    AllowL7,
    /// The destination has no such named port.
    #[serde(rename = "-")]
    NoPort,
    /// The flows of the cell (group members, address families) are not
    /// all decided alike.
    #[serde(rename = "mixed")]
    Mixed,
}

impl Mark {
    /// The letter a table shows.
    pub fn letter(self) -> char {
        match self {
            Mark::Allow => 'A',
            Mark::Drop => 'D',
            Mark::Reject => 'R',
            Mark::AllowL7 => 'L',
            Mark::NoPort => '-',
            Mark::Mixed => '~',
        }
    }
}

/// Who can reach whom: `cells[row][column][port]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Matrix {
    pub ports: Vec<String>,
    /// Endpoints (or groups) as sources, then as destinations.
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    pub cells: Vec<Vec<Vec<Mark>>>,
}

/// The endpoints `names` of `side` (grouped by the value of the label
/// `group_by` within their Namespace, when given) against each other on
/// every port of `ports`.
pub fn matrix(
    side: &Side,
    names: &[String],
    ports: &[MatrixPort],
    group_by: Option<&str>,
) -> Matrix {
    let groups = group(side, names, group_by);
    let labels: Vec<String> = groups.keys().cloned().collect();
    let members: Vec<&Vec<String>> = groups.values().collect();
    let cells = members
        .iter()
        .map(|srcs| {
            members
                .iter()
                .map(|dsts| {
                    ports
                        .iter()
                        .map(|port| cell(side, srcs, dsts, port))
                        .collect()
                })
                .collect()
        })
        .collect();
    Matrix {
        ports: ports.iter().map(ToString::to_string).collect(),
        rows: labels.clone(),
        columns: labels,
        cells,
    }
}

/// Every port the rules of `side` name (the first of a range), every
/// named port, and ICMP when a rule names it: the default columns.
pub fn rule_ports(side: &Side) -> Vec<MatrixPort> {
    let mut ports = std::collections::BTreeSet::new();
    for ruleset in side.rulesets() {
        for rule in ruleset.compiled_rules() {
            for service in &rule.services {
                match service {
                    ServiceMatch::Ports {
                        protocol, first, ..
                    } => {
                        ports.insert(MatrixPort::Number(*protocol, *first));
                    }
                    ServiceMatch::Named { protocol, name, .. } => {
                        ports.insert(MatrixPort::Named(*protocol, name.clone()));
                    }
                    ServiceMatch::Icmp { .. } => {
                        ports.insert(MatrixPort::Icmp);
                    }
                    _ => {}
                }
            }
        }
    }
    ports.into_iter().collect()
}

/// Group label → member names: `namespace/LABEL=value` (a member without
/// the label keeps its own name), or each name alone.
fn group(side: &Side, names: &[String], group_by: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in names {
        let info = side.endpoints().get(name);
        let label = match (group_by, info) {
            (Some(key), Some(info)) => match (info.labels.get(key), &info.namespace) {
                (Some(value), Some(ns)) => format!("{ns}/{key}={value}"),
                (Some(value), None) => format!("node:{key}={value}"),
                (None, _) => name.clone(),
            },
            _ => name.clone(),
        };
        groups.entry(label).or_default().push(name.clone());
    }
    groups
}

fn cell(side: &Side, srcs: &[String], dsts: &[String], port: &MatrixPort) -> Mark {
    let mut seen: Option<Mark> = None;
    for src in srcs {
        for dst in dsts {
            for mark in pair(side, src, dst, port) {
                match seen {
                    None => seen = Some(mark),
                    Some(s) if s == mark => {}
                    Some(_) => return Mark::Mixed,
                }
            }
        }
    }
    seen.unwrap_or(Mark::NoPort)
}

/// The marks of one pair: one per address family both ends have.
fn pair(side: &Side, src: &str, dst: &str, port: &MatrixPort) -> Vec<Mark> {
    let addresses = |name: &str| {
        side.endpoints()
            .get(name)
            .map(|i| i.addresses.clone())
            .unwrap_or_default()
    };
    let (srcs, dsts) = (addresses(src), addresses(dst));
    let mut marks = Vec::new();
    for v6 in [false, true] {
        let pick = |ips: &[IpAddr]| ips.iter().copied().find(|ip| ip.is_ipv6() == v6);
        let (Some(s), Some(d)) = (pick(&srcs), pick(&dsts)) else {
            continue;
        };
        let transport = match port {
            MatrixPort::Icmp => Some(Transport::Icmp {
                icmp_type: if v6 { 128 } else { 8 },
                icmp_code: 0,
            }),
            MatrixPort::Number(p, n) => Some(transport(*p, *n)),
            MatrixPort::Named(p, name) => side
                .ruleset_of(d)
                .and_then(|(_, r)| r.named_port(d, name, *p))
                .map(|n| transport(*p, n)),
        };
        let Some(transport) = transport else {
            marks.push(Mark::NoPort);
            continue;
        };
        let flow = Flow {
            src: s,
            dst: d,
            transport,
            local: None,
        };
        let decided = side.decide(&flow, &NoFqdn);
        marks.push(match decided.verdict {
            Verdict::Allow if !decided.l7.is_empty() => Mark::AllowL7,
            Verdict::Allow => Mark::Allow,
            Verdict::Drop => Mark::Drop,
            Verdict::Reject => Mark::Reject,
        });
    }
    marks
}

/// A TCP/UDP/SCTP transport to `port` from an ephemeral port.
fn transport(protocol: PortProtocol, port: u16) -> Transport {
    let src_port = 40000;
    match protocol {
        PortProtocol::Tcp => Transport::Tcp {
            src_port,
            dst_port: port,
        },
        PortProtocol::Udp => Transport::Udp {
            src_port,
            dst_port: port,
        },
        PortProtocol::Sctp => Transport::Sctp {
            src_port,
            dst_port: port,
        },
    }
}
