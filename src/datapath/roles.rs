//! Which queues the installed rules send packets to, and as what: a
//! connection's first packet, a DNS message, an L7 connection's segment,
//! read back from the rule text the plan writes ([`routed`]); and the
//! queues whose role there differs from the role a configuration gives
//! them ([`crossed`]). A starting agent that adopts an earlier agent's
//! rules must not bind such a queue before those rules are rewritten: its
//! worker would judge packets meant for another (an L7 connection's
//! SYN-ACK taken for a first packet and allowed, its connmark then saying
//! "allowed" for good; a SYN passed by an L7 worker, or accepted by the DNS
//! worker, decided by nobody). Pure.

use std::collections::BTreeMap;

use crate::config::QueueNumbers;

use super::plan::{L7_CHAIN, L7_QUEUE_CHAIN};
use super::state::{Family, State};

/// What a queue's packets are, for the rules or for a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// New connections (and packets conntrack cannot place): the
    /// connection queues.
    Connection,
    /// DNS messages to learn from: the DNS queue.
    Dns,
    /// Segments of connections under L7 rules: the L7 queues.
    L7,
    /// A rule the plan does not write (another version's, or altered).
    Unknown,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Connection => "connection",
            Role::Dns => "DNS",
            Role::L7 => "L7",
            Role::Unknown => "unknown",
        })
    }
}

/// A queue that the installed rules feed as `kernel` and a configuration
/// reads as `agent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossed {
    pub queue: u16,
    pub kernel: Role,
    pub agent: Role,
}

impl std::fmt::Display for Crossed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue {} gets {} packets, this agent reads it as its {} queue",
            self.queue, self.kernel, self.agent
        )
    }
}

/// Every queue an `NFQUEUE` rule of `installed`'s filter and mangle tables sends
/// packets to, with the roles of the rules that do (a queue fed by rules
/// of two roles is listed with both).
pub fn routed(installed: &State) -> BTreeMap<u16, Vec<Role>> {
    let mut queues: BTreeMap<u16, Vec<Role>> = BTreeMap::new();
    for family in Family::ALL {
        let tables = [installed.table(family), installed.mangle(family)];
        for (chain, rules) in tables.into_iter().flat_map(|table| &table.chains) {
            for rule in rules {
                let Some(target) = rule.split_once("-j NFQUEUE").map(|(_, t)| t) else {
                    continue;
                };
                let role = role_of(chain, rule);
                for queue in numbers(target) {
                    let roles = queues.entry(queue).or_default();
                    if !roles.contains(&role) {
                        roles.push(role);
                    }
                }
            }
        }
    }
    queues
}

/// The queues `installed` feeds in a role other than the one `queues`
/// gives them; queues `queues` does not name are nobody's (no worker
/// reads them) and never crossed.
pub fn crossed(installed: &State, queues: &QueueNumbers) -> Vec<Crossed> {
    routed(installed)
        .into_iter()
        .filter_map(|(queue, roles)| {
            let agent = role_in(queues, queue)?;
            let kernel = roles.into_iter().find(|&role| role != agent)?;
            Some(Crossed {
                queue,
                kernel,
                agent,
            })
        })
        .collect()
}

/// What a configuration reads queue `queue` as.
fn role_in(queues: &QueueNumbers, queue: u16) -> Option<Role> {
    let within = |range: crate::config::QueueRange| range.iter().any(|q| q == queue);
    if within(queues.connection) {
        Some(Role::Connection)
    } else if queue == queues.dns {
        Some(Role::Dns)
    } else if within(queues.l7) {
        Some(Role::L7)
    } else {
        None
    }
}

/// The role of an `NFQUEUE` rule as the plan writes them: everything in
/// the L7 chains; the DNS rules (port 53 either way); the rules for new
/// and unplaceable connections; the hook chains' rule for connections
/// marked L7 before their SYN-ACK.
fn role_of(chain: &str, rule: &str) -> Role {
    if chain == L7_CHAIN || chain == L7_QUEUE_CHAIN {
        Role::L7
    } else if rule.contains("--dport 53 ") || rule.contains("--sport 53 ") {
        Role::Dns
    } else if rule.contains("--ctstate NEW ") || rule.contains("--ctstate INVALID ") {
        Role::Connection
    } else if rule.contains("-m connmark --mark ") {
        Role::L7
    } else {
        Role::Unknown
    }
}

/// The queues of an `NFQUEUE` target's options (`--queue-num N`,
/// `--queue-balance A:B`; neither: queue 0); none when they cannot be
/// read.
fn numbers(target: &str) -> Vec<u16> {
    let mut words = target.split_whitespace();
    while let Some(word) = words.next() {
        match (word, words.clone().next()) {
            ("--queue-num", Some(n)) => return n.parse().into_iter().collect(),
            ("--queue-balance", Some(range)) => {
                let Some((a, b)) = range.split_once(':') else {
                    return Vec::new();
                };
                return match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) => (a..=b).collect(),
                    _ => Vec::new(),
                };
            }
            _ => {}
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests;
