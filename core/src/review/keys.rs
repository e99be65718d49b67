//! What the two sides' rules can tell apart, compared across sides: each
//! compiled rule reduced to its content (everything but its rank and
//! logging, address sets by their members), each endpoint's rule lists to
//! the contents in order, interned to numbers shared by both sides — so
//! an endpoint whose lists are equal on both sides decides alike in its
//! direction. And which of a group's rules each point is a peer of,
//! checked by the classifier's own peer match. Nothing here decides a
//! flow.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use super::side::Side;
use super::universe::{PointId, PointKind, Universe};
use crate::model::{Direction, L7Protocol, PortProtocol, RuleAction};
use crate::ruleset::{Block, CompiledRule, PolicyRef, Ruleset, ServiceMatch};

/// A rule of one side: the side (0 before, 1 after), the host and the
/// rule's id in that host's ruleset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RuleAt {
    pub side: u8,
    pub host: u32,
    pub rule: u32,
}

/// A rule's content: what it matches and how it reports itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RuleContent {
    policy: PolicyRef,
    tier: Option<String>,
    tier_priority: Option<i32>,
    policy_priority: Option<u64>,
    name: Option<String>,
    index: usize,
    direction: Direction,
    action: RuleAction,
    /// In dry-run: never decides the enforced outcome the review compares.
    dry_run: bool,
    l7: Arc<[L7Protocol]>,
    any: bool,
    sets: Vec<u32>,
    blocks: Vec<Block>,
    fqdns: Vec<String>,
    to_services: Vec<(IpAddr, PortProtocol, u16)>,
    services: Vec<ServiceMatch>,
    node_ports: Option<Vec<(PortProtocol, u16)>>,
}

/// The lists of one direction of a point on one side, and (ingress) its
/// named ports.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ListContent {
    /// The enforcing host, whether the point is its local Node, and the
    /// lists as content ids; `None` when no host enforces for the point.
    enforced: Option<Enforced>,
    named_ports: Vec<(String, PortProtocol, u16)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Enforced {
    host: String,
    local_node: bool,
    antrea: Vec<u32>,
    k8s: Option<Vec<u32>>,
    isolated: bool,
    baseline: Vec<u32>,
    isolated_by: Vec<PolicyRef>,
}

/// The interned contents of both sides.
pub(crate) struct Keys {
    /// Per side, per point: the egress and ingress list ids.
    point_keys: [Vec<[u32; 2]>; 2],
}

impl Keys {
    pub fn build(sides: [&Side; 2], universe: &Universe) -> Keys {
        let mut sets: HashMap<usize, u32> = HashMap::new();
        let mut set_contents: HashMap<Vec<IpAddr>, u32> = HashMap::new();
        let mut rules: HashMap<RuleContent, u32> = HashMap::new();
        let rule_ids: [Vec<Vec<u32>>; 2] = sides.map(|side| {
            side.rulesets()
                .map(|ruleset| {
                    ruleset
                        .compiled_rules()
                        .iter()
                        .map(|rule| {
                            let content = content(ruleset, rule, &mut sets, &mut set_contents);
                            let next = rules.len() as u32;
                            *rules.entry(content).or_insert(next)
                        })
                        .collect()
                })
                .collect()
        });
        let mut lists: HashMap<ListContent, u32> = HashMap::new();
        let mut point_keys: [Vec<[u32; 2]>; 2] = [Vec::new(), Vec::new()];
        for (s, side) in sides.iter().enumerate() {
            let ids: &Vec<Vec<u32>> = &rule_ids[s];
            point_keys[s] = universe
                .points
                .iter()
                .map(|point| {
                    [Direction::Egress, Direction::Ingress].map(|direction| {
                        let content = match point.kind {
                            PointKind::Address => list_content(side, ids, point.rep, direction),
                            _ => ListContent {
                                enforced: None,
                                named_ports: Vec::new(),
                            },
                        };
                        let next = lists.len() as u32;
                        *lists.entry(content).or_insert(next)
                    })
                })
                .collect();
        }
        Keys { point_keys }
    }

    /// The list id of `point`'s `direction` on `side`.
    pub fn list(&self, side: usize, point: PointId, direction: Direction) -> u32 {
        self.point_keys[side][point as usize][match direction {
            Direction::Egress => 0,
            Direction::Ingress => 1,
        }]
    }

    /// Whether `point`'s lists of `direction` differ between the sides.
    pub fn changed(&self, point: PointId, direction: Direction) -> bool {
        self.list(0, point, direction) != self.list(1, point, direction)
    }
}

fn content(
    ruleset: &Ruleset,
    rule: &CompiledRule,
    sets: &mut HashMap<usize, u32>,
    set_contents: &mut HashMap<Vec<IpAddr>, u32>,
) -> RuleContent {
    let r = &rule.reference;
    let peers = &rule.peers;
    RuleContent {
        policy: r.policy.clone(),
        tier: r.tier.clone(),
        tier_priority: r.tier_priority,
        policy_priority: r.policy_priority.map(f64::to_bits),
        name: r.name.clone(),
        index: r.index,
        direction: r.direction,
        action: r.action,
        dry_run: r.dry_run,
        l7: r.l7.clone(),
        any: peers.any,
        sets: peers
            .addresses
            .iter()
            .map(|set| {
                let key = Arc::as_ptr(set) as usize;
                *sets.entry(key).or_insert_with(|| {
                    let members: Vec<IpAddr> = set.iter().collect();
                    let next = set_contents.len() as u32;
                    *set_contents.entry(members).or_insert(next)
                })
            })
            .collect(),
        blocks: peers.blocks.clone(),
        fqdns: peers
            .fqdns
            .iter()
            .map(|&i| ruleset.fqdn_patterns()[i as usize].as_str().to_string())
            .collect(),
        to_services: peers.services.clone(),
        services: rule.services.clone(),
        node_ports: rule.node_ports.clone(),
    }
}

fn list_content(side: &Side, ids: &[Vec<u32>], ip: IpAddr, direction: Direction) -> ListContent {
    let owner = side.ruleset_of(ip);
    let named_ports = match (direction, owner) {
        (Direction::Ingress, Some((_, ruleset))) => ruleset.named_ports_of(ip).to_vec(),
        _ => Vec::new(),
    };
    let enforced = owner.and_then(|(host, ruleset)| {
        let lists = ruleset.lists_of(ip, direction)?;
        let ids = &ids[host];
        let map = |list: &[u32]| list.iter().map(|&r| ids[r as usize]).collect::<Vec<_>>();
        Some(Enforced {
            host: side.hosts[host].name.clone(),
            local_node: lists.local_node,
            antrea: map(lists.antrea),
            k8s: lists.k8s.map(map),
            isolated: lists.isolated,
            baseline: map(lists.baseline),
            isolated_by: lists.isolated_by.to_vec(),
        })
    });
    ListContent {
        enforced,
        named_ports,
    }
}

/// The rules of `direction` of the endpoint owning `ip` on side `side`,
/// in evaluation order.
pub(crate) fn rules_of(
    side_index: u8,
    side: &Side,
    ip: IpAddr,
    direction: Direction,
) -> Vec<RuleAt> {
    let Some((host, ruleset)) = side.ruleset_of(ip) else {
        return Vec::new();
    };
    let Some(lists) = ruleset.lists_of(ip, direction) else {
        return Vec::new();
    };
    lists
        .rules()
        .map(|rule| RuleAt {
            side: side_index,
            host: host as u32,
            rule,
        })
        .collect()
}

/// For each candidate point that is a peer of some of `rules` (each on
/// its side's ruleset), which: bit `2k` when the point is among rule
/// `k`'s peer addresses (the classifier's own check, with the point's
/// FQDN answers), bit `2k + 1` when it is one of rule `k`'s `toServices`
/// ClusterIPs. A rule matching every address sets no bit (it tells no
/// point apart). Points in no rule's peers are left out.
pub(crate) fn peer_bits(
    sides: [&Side; 2],
    universe: &Universe,
    rules: &[RuleAt],
    candidate: &[bool],
) -> BTreeMap<PointId, Vec<u32>> {
    let mut bits: BTreeMap<PointId, Vec<u32>> = BTreeMap::new();
    let mut set = |point: PointId, bit: u32| {
        if candidate[point as usize] {
            let list = bits.entry(point).or_default();
            if list.last() != Some(&bit) {
                list.push(bit);
            }
        }
    };
    for (k, at) in rules.iter().enumerate() {
        let ruleset = &sides[at.side as usize].hosts[at.host as usize].ruleset;
        let rule = &ruleset.compiled_rules()[at.rule as usize];
        let peers = &rule.peers;
        let bit = 2 * k as u32;
        let mut check = |point: PointId| {
            let p = &universe.points[point as usize];
            if candidate[point as usize]
                && peers.matches_address(p.rep, &universe.lookup(point), ruleset.fqdn_patterns())
            {
                set(point, bit);
            }
        };
        if !peers.any {
            for members in &peers.addresses {
                for ip in members.iter() {
                    if let Some(&point) = universe.by_address.get(&ip) {
                        check(point);
                    }
                }
            }
            for block in &peers.blocks {
                for point in universe.within(&block.cidr) {
                    check(point);
                }
            }
            if !peers.fqdns.is_empty() {
                for (point, p) in universe.points.iter().enumerate() {
                    if matches!(p.kind, PointKind::Fqdn(_)) {
                        check(point as PointId);
                    }
                }
            }
        }
        for (ip, _, _) in &peers.services {
            if let Some(&point) = universe.by_address.get(ip) {
                set(point, bit + 1);
            }
        }
    }
    for list in bits.values_mut() {
        list.sort_unstable();
        list.dedup();
    }
    bits
}
