//! The points a review considers, for both sides at once: every address
//! of the inventories, every Service ClusterIP a rule names, the pieces
//! the rules' ipBlocks cut the rest of the address space into (one point
//! per set of blocks holding them, standing for every address there that
//! is no endpoint), and one symbolic point per FQDN selector and address
//! family. A point is what a flow's source or destination can be; each
//! carries a representative address and the FQDN answers that hold for
//! it. Built from the compiled rulesets; nothing here decides a flow.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::side::Side;
use crate::fqdn::{FqdnLookup, FqdnPattern};
use crate::ruleset::Block;

/// Index of a point in [`Universe::points`].
pub(crate) type PointId = u32;

/// What a point stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PointKind {
    /// An address of an inventory endpoint, or a ClusterIP.
    Address,
    /// Every address of these networks that is no endpoint and no
    /// ClusterIP: a piece of the address space no ipBlock tells apart.
    External(Vec<IpNet>),
    /// An address only this FQDN selector's names resolve to, outside
    /// every ipBlock.
    Fqdn(String),
}

/// A source or destination of the flows a review considers.
#[derive(Clone, Debug)]
pub(crate) struct Point {
    /// The address flows from or to the point are classified with.
    pub rep: IpAddr,
    pub kind: PointKind,
    /// The Namespace of the endpoint the address belongs to.
    pub namespace: Option<String>,
}

impl Point {
    /// Whether the point can send a connection: an FQDN selector only
    /// receives them. A ClusterIP sends like any address outside the
    /// endpoints (kube-proxy never makes it a new connection's source, but
    /// a forged packet or an IPVS node's own traffic can), in its own rows:
    /// a rule may name it apart from the piece around it.
    pub fn sends(&self) -> bool {
        !matches!(self.kind, PointKind::Fqdn(_))
    }
}

/// The FQDN answers holding for a flow's destination: none, or the
/// representative address of an FQDN point, resolved by its selector.
pub(crate) struct PointLookup<'a>(pub Option<(&'a str, IpAddr)>);

impl FqdnLookup for PointLookup<'_> {
    fn resolves_to(&self, pattern: &FqdnPattern, ip: IpAddr) -> bool {
        self.0
            .is_some_and(|(selector, rep)| rep == ip && pattern.as_str() == selector)
    }
}

/// Every point of a review.
pub(crate) struct Universe {
    pub points: Vec<Point>,
    pub by_address: HashMap<IpAddr, PointId>,
    /// Every point's representative address with its id, sorted (for the
    /// points inside a block).
    sorted: Vec<(IpAddr, PointId)>,
}

impl Universe {
    /// The points of both sides.
    pub fn build(sides: [&Side; 2]) -> Universe {
        let mut points = Vec::new();
        let mut by_address = HashMap::new();
        // The newer side names first: its namespace wins.
        for side in [sides[1], sides[0]] {
            for (name, info) in side.endpoints() {
                for &ip in &info.addresses {
                    by_address.entry(ip).or_insert_with(|| {
                        points.push(Point {
                            rep: ip,
                            kind: PointKind::Address,
                            namespace: name
                                .split_once('/')
                                .filter(|_| !name.starts_with("node:"))
                                .map(|(ns, _)| ns.to_string()),
                        });
                        (points.len() - 1) as PointId
                    });
                }
            }
        }
        let mut blocks: BTreeSet<(IpNet, Vec<IpNet>)> = BTreeSet::new();
        let mut patterns: BTreeSet<String> = BTreeSet::new();
        let mut cluster_ips = BTreeSet::new();
        for ruleset in sides.iter().flat_map(|s| s.rulesets()) {
            for rule in ruleset.compiled_rules() {
                for block in &rule.peers.blocks {
                    blocks.insert((block.cidr, block.except.clone()));
                }
                for &(ip, _, _) in &rule.peers.services {
                    cluster_ips.insert(ip);
                }
                for &i in &rule.peers.fqdns {
                    patterns.insert(ruleset.fqdn_patterns()[i as usize].as_str().to_string());
                }
            }
        }
        for &ip in &cluster_ips {
            by_address.entry(ip).or_insert_with(|| {
                points.push(Point {
                    rep: ip,
                    kind: PointKind::Address,
                    namespace: None,
                });
                (points.len() - 1) as PointId
            });
        }
        let blocks: Vec<Block> = blocks
            .into_iter()
            .map(|(cidr, except)| Block::new(cidr, &except))
            .collect();
        let mut outside = Vec::new();
        for v6 in [false, true] {
            let pieces = external_pieces(&blocks, v6, &by_address);
            for (signature, (rep, nets)) in pieces {
                if signature.is_empty() {
                    outside.push(rep);
                }
                by_address.insert(rep, points.len() as PointId);
                points.push(Point {
                    rep,
                    kind: PointKind::External(nets),
                    namespace: None,
                });
            }
        }
        // An FQDN point's address: one outside every block when there is
        // one, else any free address of the family.
        for v6 in [false, true] {
            let rep = outside
                .iter()
                .copied()
                .find(|ip| ip.is_ipv6() == v6)
                .unwrap_or_else(|| free_address(v6, &by_address));
            for pattern in &patterns {
                points.push(Point {
                    rep,
                    kind: PointKind::Fqdn(pattern.clone()),
                    namespace: None,
                });
            }
        }
        let mut sorted: Vec<(IpAddr, PointId)> = points
            .iter()
            .enumerate()
            .map(|(i, p)| (p.rep, i as PointId))
            .collect();
        sorted.sort();
        Universe {
            points,
            by_address,
            sorted,
        }
    }

    /// The FQDN answers holding for flows to `point`.
    pub fn lookup(&self, point: PointId) -> PointLookup<'_> {
        let p = &self.points[point as usize];
        match &p.kind {
            PointKind::Fqdn(pattern) => PointLookup(Some((pattern.as_str(), p.rep))),
            _ => PointLookup(None),
        }
    }

    /// The points whose representative address is in `net`.
    pub fn within(&self, net: &IpNet) -> impl Iterator<Item = PointId> + '_ {
        let first = self.sorted.partition_point(|(ip, _)| *ip < net.network());
        let broadcast = net.broadcast();
        self.sorted[first..]
            .iter()
            .take_while(move |(ip, _)| *ip <= broadcast)
            .map(|&(_, id)| id)
    }
}

/// An address as a number, for cutting ranges.
fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn address(n: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(n))
    } else {
        IpAddr::V4(Ipv4Addr::from(n as u32))
    }
}

fn top(v6: bool) -> u128 {
    if v6 {
        u128::MAX
    } else {
        u128::from(u32::MAX)
    }
}

/// A piece being built: its representative, once found, and its ranges.
type Piece = (Option<IpAddr>, Vec<(u128, u128)>);

/// The pieces of one family's address space that `blocks` cut it into,
/// merged by the set of blocks holding them (the signature, as block
/// positions): for each, a representative address that is no point yet,
/// and its networks. A piece every address of which is taken is left out.
fn external_pieces(
    blocks: &[Block],
    v6: bool,
    taken: &HashMap<IpAddr, PointId>,
) -> BTreeMap<Vec<usize>, (IpAddr, Vec<IpNet>)> {
    let mut starts: BTreeSet<u128> = BTreeSet::from([0]);
    let nets = blocks
        .iter()
        .flat_map(|b| std::iter::once(&b.cidr).chain(&b.except))
        .filter(|n| n.addr().is_ipv6() == v6);
    for net in nets {
        starts.insert(number(net.network()));
        if let Some(after) = number(net.broadcast()).checked_add(1) {
            if after <= top(v6) {
                starts.insert(after);
            }
        }
    }
    let starts: Vec<u128> = starts.into_iter().collect();
    let mut taken_sorted: Vec<u128> = taken
        .keys()
        .filter(|ip| ip.is_ipv6() == v6)
        .map(|ip| number(*ip))
        .collect();
    taken_sorted.sort_unstable();
    let mut pieces: BTreeMap<Vec<usize>, Piece> = BTreeMap::new();
    for (i, &lo) in starts.iter().enumerate() {
        let hi = starts.get(i + 1).map_or(top(v6), |next| next - 1);
        let probe = address(lo, v6);
        let signature: Vec<usize> = blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.cidr.addr().is_ipv6() == v6 && b.contains(probe))
            .map(|(i, _)| i)
            .collect();
        let entry = pieces.entry(signature).or_insert((None, Vec::new()));
        if entry.0.is_none() {
            entry.0 = first_free(lo, hi, &taken_sorted).map(|n| address(n, v6));
        }
        match entry.1.last_mut() {
            Some((_, end)) if *end + 1 == lo => *end = hi,
            _ => entry.1.push((lo, hi)),
        }
    }
    pieces
        .into_iter()
        .filter_map(|(signature, (rep, ranges))| {
            let nets = ranges
                .into_iter()
                .flat_map(|(lo, hi)| networks(lo, hi, v6))
                .collect();
            Some((signature, (rep?, nets)))
        })
        .collect()
}

/// The lowest number in `lo..=hi` not in `taken` (sorted).
fn first_free(lo: u128, hi: u128, taken: &[u128]) -> Option<u128> {
    let mut candidate = lo;
    let mut at = taken.partition_point(|&t| t < lo);
    while at < taken.len() && taken[at] == candidate {
        if candidate == hi {
            return None;
        }
        candidate += 1;
        at += 1;
    }
    Some(candidate)
}

/// An address of the family that is no point (used when every piece
/// outside the blocks is taken).
fn free_address(v6: bool, taken: &HashMap<IpAddr, PointId>) -> IpAddr {
    let mut n = 1u128;
    loop {
        let ip = address(n, v6);
        if !taken.contains_key(&ip) {
            return ip;
        }
        n += 1;
    }
}

/// The fewest networks covering exactly `lo..=hi`.
fn networks(lo: u128, hi: u128, v6: bool) -> Vec<IpNet> {
    let bits: u32 = if v6 { 128 } else { 32 };
    // The last number of the block of 2^size numbers from `start`.
    let last = |start: u128, size: u32| match size {
        128.. => u128::MAX,
        _ => start + ((1u128 << size) - 1),
    };
    let mut out = Vec::new();
    let mut start = lo;
    loop {
        // The largest block aligned at `start` that stays within `hi`.
        let mut size = if start == 0 {
            bits
        } else {
            start.trailing_zeros().min(bits)
        };
        while last(start, size) > hi {
            size -= 1;
        }
        let prefix = (bits - size) as u8;
        out.push(if v6 {
            IpNet::V6(Ipv6Net::new(Ipv6Addr::from(start), prefix).expect("prefix within 128"))
        } else {
            IpNet::V4(Ipv4Net::new(Ipv4Addr::from(start as u32), prefix).expect("prefix within 32"))
        });
        let end = last(start, size);
        if end >= hi {
            return out;
        }
        start = end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lo: &str, hi: &str) -> Vec<String> {
        let lo: IpAddr = lo.parse().unwrap();
        let hi: IpAddr = hi.parse().unwrap();
        networks(number(lo), number(hi), lo.is_ipv6())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn ranges_become_the_fewest_networks() {
        assert_eq!(texts("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
        assert_eq!(texts("10.0.0.0", "10.0.0.255"), ["10.0.0.0/24"]);
        assert_eq!(
            texts("10.0.0.1", "10.0.0.6"),
            ["10.0.0.1/32", "10.0.0.2/31", "10.0.0.4/31", "10.0.0.6/32"]
        );
        assert_eq!(
            texts("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            ["::/0"]
        );
        assert_eq!(texts("11.0.0.0", "255.255.255.255").len(), 6);
    }

    #[test]
    fn the_first_free_address_skips_taken_ones() {
        assert_eq!(first_free(5, 9, &[5, 6, 8]), Some(7));
        assert_eq!(first_free(5, 6, &[5, 6]), None);
        assert_eq!(first_free(0, 3, &[]), Some(0));
    }
}
