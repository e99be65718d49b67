//! Rules Antrea puts in no defined order: two rules of different policies
//! at the same rule-level priority (same Tier, policy priority and rule
//! index, so the same rank in Antrea's OpenFlow tables) for the same
//! direction of the same endpoint, with different actions, whose traffic
//! can overlap. Antrea calls such traffic's verdict nondeterministic and
//! "the policy writer's responsibility"; tollgate evaluates them by kind,
//! Namespace and name, and [`Ruleset::ties`] names them so they can be
//! warned about. Rules that agree on the action are no tie: the verdict is
//! the same in either order. Pure: reads the compiled rules, decides no
//! flow.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use super::rule::{CompiledRule, PeerMatch, ServiceMatch};
use super::{Endpoint, RuleRef, Ruleset};
use crate::model::{Direction, PortProtocol};

/// Two rules in no order Antrea defines, and where they meet.
#[derive(Clone, Debug, PartialEq)]
pub struct Tie {
    /// The rule tollgate evaluates first.
    pub first: RuleRef,
    /// The rule tollgate evaluates second.
    pub second: RuleRef,
    /// The endpoints of this node both rules apply to, in the ruleset's
    /// order.
    pub endpoints: Vec<Endpoint>,
}

/// What makes two rules tie: direction, Tier priority, policy priority
/// (as bits: equal priorities are equal floats) and rule index.
type Rank = (Direction, Option<i32>, Option<u64>, usize);

impl Ruleset {
    /// Every pair of rules in no defined order, each once, with the
    /// endpoints they meet on; in evaluation order of the first rule.
    pub fn ties(&self) -> Vec<Tie> {
        // Tables are shared by endpoints with equal lists: each is read once.
        let mut pairs: BTreeMap<(u32, u32), BTreeSet<usize>> = BTreeMap::new();
        let mut per_table: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
        for (endpoint, &table) in self.endpoint_tables.iter().enumerate() {
            let found = per_table.entry(table).or_insert_with(|| {
                let table = &self.tables[table as usize];
                let mut found = Vec::new();
                for direction in [&table.ingress, &table.egress] {
                    for list in [&direction.antrea, &direction.baseline] {
                        found.extend(tied_in(list.rules(), &self.rules));
                    }
                }
                found
            });
            for pair in found.iter() {
                pairs.entry(*pair).or_default().insert(endpoint);
            }
        }
        pairs
            .into_iter()
            .map(|((first, second), endpoints)| Tie {
                first: (*self.rules[first as usize].reference).clone(),
                second: (*self.rules[second as usize].reference).clone(),
                endpoints: endpoints
                    .into_iter()
                    .map(|e| self.endpoints[e].clone())
                    .collect(),
            })
            .collect()
    }
}

/// The tied pairs of one rule list (positions into `rules`, the earlier
/// first).
fn tied_in(list: &[u32], rules: &[CompiledRule]) -> Vec<(u32, u32)> {
    let mut by_rank: BTreeMap<Rank, Vec<u32>> = BTreeMap::new();
    for &id in list {
        let r = &rules[id as usize].reference;
        let rank = (
            r.direction,
            r.tier_priority,
            r.policy_priority.map(f64::to_bits),
            r.index,
        );
        by_rank.entry(rank).or_default().push(id);
    }
    let mut tied = Vec::new();
    for ids in by_rank.values().filter(|ids| ids.len() > 1) {
        for (i, &a) in ids.iter().enumerate() {
            for &b in &ids[i + 1..] {
                let (ra, rb) = (&rules[a as usize], &rules[b as usize]);
                if ra.reference.policy != rb.reference.policy
                    && ra.action() != rb.action()
                    && may_overlap(ra, rb)
                {
                    tied.push((a.min(b), a.max(b)));
                }
            }
        }
    }
    tied
}

/// Whether some flow could match both rules. Errs towards yes: a name
/// may resolve to any address, a named port to any number.
fn may_overlap(a: &CompiledRule, b: &CompiledRule) -> bool {
    peers_overlap(&a.peers, &b.peers)
        && services_overlap(&a.services, &b.services)
        && match (&a.node_ports, &b.node_ports) {
            (Some(x), Some(y)) => x.iter().any(|p| y.contains(p)),
            _ => true,
        }
}

fn peers_overlap(a: &PeerMatch, b: &PeerMatch) -> bool {
    if a.any || b.any {
        return true;
    }
    let addresses = a.addresses.iter().any(|set| {
        set.iter().any(|ip| {
            b.addresses.iter().any(|other| other.contains(&ip))
                || b.blocks.iter().any(|block| block.contains(ip))
                || b.services.iter().any(|(cluster_ip, ..)| *cluster_ip == ip)
        })
    });
    let reverse = b.addresses.iter().any(|set| {
        set.iter().any(|ip| {
            a.blocks.iter().any(|block| block.contains(ip))
                || a.services.iter().any(|(cluster_ip, ..)| *cluster_ip == ip)
        })
    });
    let blocks = a.blocks.iter().any(|x| {
        b.blocks
            .iter()
            .any(|y| nets_overlap(&x.cidr, &y.cidr) && !covered(&x.cidr, &y.except))
    });
    // A name may resolve into any block; two rules naming the same
    // selector meet on its every answer.
    let fqdns = (!a.fqdns.is_empty() && !b.blocks.is_empty())
        || (!b.fqdns.is_empty() && !a.blocks.is_empty())
        || a.fqdns.iter().any(|f| b.fqdns.contains(f));
    let services = a.services.iter().any(|s| b.services.contains(s));
    addresses || reverse || blocks || fqdns || services
}

fn nets_overlap(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Whether `net` lies wholly in one of the holes `except`.
fn covered(net: &IpNet, except: &[IpNet]) -> bool {
    except.iter().any(|hole| hole.contains(net))
}

fn services_overlap(a: &[ServiceMatch], b: &[ServiceMatch]) -> bool {
    if a.is_empty() || b.is_empty() {
        return true;
    }
    a.iter().any(|x| b.iter().any(|y| service_overlap(x, y)))
}

fn service_overlap(a: &ServiceMatch, b: &ServiceMatch) -> bool {
    use ServiceMatch::*;
    let sources = |x: &Option<(u16, u16)>, y: &Option<(u16, u16)>| match (x, y) {
        (Some((a1, a2)), Some((b1, b2))) => a1 <= b2 && b1 <= a2,
        _ => true,
    };
    match (a, b) {
        (
            Icmp {
                icmp_type: t1,
                icmp_code: c1,
            },
            Icmp {
                icmp_type: t2,
                icmp_code: c2,
            },
        ) => agree(t1, t2) && agree(c1, c2),
        (
            Igmp {
                igmp_type: t1,
                group: g1,
            },
            Igmp {
                igmp_type: t2,
                group: g2,
            },
        ) => agree(t1, t2) && agree(g1, g2),
        (Icmp { .. } | Igmp { .. }, _) | (_, Icmp { .. } | Igmp { .. }) => false,
        _ => {
            let (pa, sa, ra) = transport(a);
            let (pb, sb, rb) = transport(b);
            let ports = match (ra, rb) {
                (Some((a1, a2)), Some((b1, b2))) => a1 <= b2 && b1 <= a2,
                _ => true,
            };
            let named = match (a, b) {
                (Named { name: x, .. }, Named { name: y, .. }) => x == y,
                _ => true,
            };
            pa == pb && sources(&sa, &sb) && ports && named
        }
    }
}

/// An inclusive port range.
type Range = (u16, u16);

/// Protocol, source range and destination range of a transport entry
/// (`None` range: any port, or a named one).
fn transport(s: &ServiceMatch) -> (Option<PortProtocol>, Option<Range>, Option<Range>) {
    match s {
        ServiceMatch::Protocol { protocol, source } => (Some(*protocol), *source, None),
        ServiceMatch::Ports {
            protocol,
            first,
            last,
            source,
        } => (Some(*protocol), *source, Some((*first, *last))),
        ServiceMatch::Named {
            protocol, source, ..
        } => (Some(*protocol), *source, None),
        ServiceMatch::Icmp { .. } | ServiceMatch::Igmp { .. } => (None, None, None),
    }
}

/// Two optional fields match a common value: either is unset, or equal.
fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}
