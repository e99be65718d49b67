//! The local endpoints' part of the plan: the unknown addresses of the
//! local endpoint ranges (the Node's podCIDRs, a Docker host's container
//! networks) that a closed `startupPolicy` drops, and the Node ports
//! published for enforced endpoints, queued on INPUT. Pure.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::config::{DatapathConfig, StartupPolicy};
use crate::model::PortProtocol;

use super::{Family, Hook, RangeSet, Scope, Selection};

/// Name of the range set of a family's unknown addresses: the local
/// endpoint ranges with every known address as an exception
/// ([`crate::ruleset::Enforced::is_unknown`]).
pub fn unknown_set(family: Family) -> String {
    match family {
        Family::V4 => "tollgate-unknown-v4".into(),
        Family::V6 => "tollgate-unknown-v6".into(),
    }
}

/// The unknown addresses of a family's local endpoint ranges, when the
/// closed `startupPolicy` drops their connections.
pub(super) fn unknown_addresses(
    config: &DatapathConfig,
    selection: Selection,
    family: Family,
) -> Option<RangeSet> {
    let Selection::Enforced(enforced) = selection else {
        return None;
    };
    if config.startup_policy != StartupPolicy::Closed {
        return None;
    }
    let of_family = |ip: &IpAddr| Family::of(ip) == family;
    let ranges: BTreeSet<_> = enforced
        .ranges
        .iter()
        .filter(|r| of_family(&r.addr()))
        .copied()
        .collect();
    (!ranges.is_empty()).then(|| RangeSet {
        family,
        ranges,
        except: enforced
            .known
            .iter()
            .filter(|ip| of_family(ip))
            .copied()
            .collect(),
    })
}

/// New connections from or to the unknown addresses of the local endpoint
/// ranges (their set, see [`unknown_set`]) are dropped: on INPUT from
/// them, on OUTPUT to them, on FORWARD both ways. Packets conntrack cannot
/// place are too; discovery (`UNTRACKED`) passes as for any endpoint.
pub(super) fn unknown_rules(scope: &Scope, family: Family, hook: Hook) -> Vec<String> {
    let set = unknown_set(family);
    let sides: &[&str] = match hook {
        Hook::Input => &["src"],
        Hook::Output => &["dst"],
        Hook::Forward => &["src", "dst"],
    };
    let mut rules = Vec::new();
    for interface in &scope.interfaces {
        for side in sides {
            // `INVALID,NEW`: the order iptables-save prints them in.
            rules.push(format!(
                "{interface}-m set --match-set {set} {side} -m conntrack --ctstate INVALID,NEW -j DROP"
            ));
        }
    }
    rules
}

/// The rule that queues new connections to a Node port published for an
/// enforced endpoint (on INPUT, where a userland proxy receives them).
pub(super) fn published_rule(
    interface: &str,
    (protocol, port): (PortProtocol, u16),
    target: &str,
) -> String {
    let name = match protocol {
        PortProtocol::Tcp => "tcp",
        PortProtocol::Udp => "udp",
        PortProtocol::Sctp => "sctp",
    };
    format!("{interface}-p {name} -m {name} --dport {port} -m conntrack --ctstate NEW -j {target}")
}

/// The published port a rule of [`published_rule`]'s form queues, read
/// back from the installed state.
pub fn published_port(rule: &str) -> Option<(PortProtocol, u16)> {
    if !rule.contains(" -m conntrack --ctstate NEW -j NFQUEUE") || rule.contains("--match-set") {
        return None;
    }
    let mut words = rule.split(' ');
    let (mut protocol, mut port) = (None, None);
    while let Some(word) = words.next() {
        match word {
            "-p" => {
                protocol = match words.next()? {
                    "tcp" => Some(PortProtocol::Tcp),
                    "udp" => Some(PortProtocol::Udp),
                    "sctp" => Some(PortProtocol::Sctp),
                    _ => None,
                }
            }
            "--dport" => port = words.next()?.parse().ok(),
            _ => {}
        }
    }
    Some((protocol?, port?))
}
