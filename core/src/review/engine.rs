//! The exhaustive comparison: every (source, destination, transport) of
//! the universe whose verdict differs between the sides, found without
//! enumerating them. A flow can only change where the source's egress
//! lists or the destination's ingress lists (or named ports) differ
//! between the sides, so the work starts from those endpoints:
//!
//! - sources whose egress changed, against every destination whose
//!   ingress did not: destinations grouped by which of the source's
//!   egress rules (either side's) they are peers of, transports cut where
//!   those rules' ports are; the egress decision compared per group and
//!   interval, and only where it differs is the pair looked at whole;
//! - destinations whose ingress changed, against every source whose
//!   egress did not: the same, the other way round;
//! - both changed: looked at whole.
//!
//! "Whole" splits both ends by every rule of both lists and cuts the
//! transport at every boundary of them, then asks both sides for the
//! decision on one flow per piece ([`Side::decide`], the classifier).
//! Within a piece no rule of either side can tell two flows apart, so the
//! piece's flows all share that decision: the result is exact, not
//! sampled (the property test in `tests.rs` checks it against every flow
//! of small universes).

use std::collections::BTreeMap;

use super::fields::{Atom, Cuts};
use super::keys::{peer_bits, rules_of, Keys, RuleAt};
use super::side::{Side, Verdicts};
use super::universe::{PointId, PointKind, Universe};
use crate::model::Direction;
use crate::packet::flow::Flow;
use crate::ruleset::ServiceMatch;

/// A set of flows that changed: every source of `srcs` to every
/// destination of `dsts` over the atom, decided `before` and `after`.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    pub srcs: u32,
    pub dsts: u32,
    pub atom: Atom,
    pub before: Verdicts,
    pub after: Verdicts,
}

/// The comparison of two sides.
pub(crate) struct Engine<'a> {
    pub sides: [&'a Side; 2],
    pub universe: Universe,
    keys: Keys,
    /// Per side and point: the host enforcing for it and whether it is
    /// that host's own Node (`None`: no host enforces for it).
    hosts: [Vec<Option<(usize, bool)>>; 2],
    /// Point sets the cells name (sorted).
    pub sets: Vec<Vec<PointId>>,
    pub cells: Vec<Cell>,
}

/// What splits a group of points: any ordered key.
type Key = Vec<u64>;

impl<'a> Engine<'a> {
    /// Compares `before` with `after`.
    pub fn run(before: &'a Side, after: &'a Side) -> Engine<'a> {
        let sides = [before, after];
        let universe = Universe::build(sides);
        let keys = Keys::build(sides, &universe);
        let mut engine = Engine {
            sides,
            universe,
            keys,
            sets: Vec::new(),
            hosts: [Vec::new(), Vec::new()],
            cells: Vec::new(),
        };
        engine.hosts = [0, 1].map(|side| {
            let s = engine.sides[side];
            engine
                .universe
                .points
                .iter()
                .map(|point| {
                    s.ruleset_of(point.rep).map(|(host, ruleset)| {
                        let node = ruleset
                            .lists_of(point.rep, Direction::Egress)
                            .is_some_and(|l| l.local_node);
                        (host, node)
                    })
                })
                .collect()
        });
        let count = engine.universe.points.len() as PointId;
        let egress_changed: Vec<PointId> = (0..count)
            .filter(|&p| engine.sends(p) && engine.keys.changed(p, Direction::Egress))
            .collect();
        let ingress_changed: Vec<PointId> = (0..count)
            .filter(|&p| engine.keys.changed(p, Direction::Ingress))
            .collect();
        let mut in_egress = vec![false; count as usize];
        let mut in_ingress = vec![false; count as usize];
        egress_changed
            .iter()
            .for_each(|&p| in_egress[p as usize] = true);
        ingress_changed
            .iter()
            .for_each(|&p| in_ingress[p as usize] = true);
        engine.one_end(&egress_changed, &in_ingress, Direction::Egress);
        engine.one_end(&ingress_changed, &in_egress, Direction::Ingress);
        engine.whole(&egress_changed, &ingress_changed, None);
        engine
    }

    fn sends(&self, point: PointId) -> bool {
        self.universe.points[point as usize].sends()
    }

    fn v6(&self, point: PointId) -> bool {
        self.universe.points[point as usize].rep.is_ipv6()
    }

    fn namespace(&self, point: PointId) -> u64 {
        // A stable number per Namespace name is enough to split by it.
        self.universe.points[point as usize]
            .namespace
            .as_deref()
            .map_or(0, |ns| {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                ns.hash(&mut h);
                h.finish() | 1
            })
    }

    /// Both sides' rules of `direction` of the endpoint at `point`.
    fn rules(&self, point: PointId, direction: Direction) -> Vec<RuleAt> {
        let ip = self.universe.points[point as usize].rep;
        let mut rules = rules_of(0, self.sides[0], ip, direction);
        rules.extend(rules_of(1, self.sides[1], ip, direction));
        rules
    }

    /// Whether the classifier lets `src` through to `dst` unconditionally
    /// on side `side` (the Node to its own Pod): part of what tells two
    /// pairs apart.
    fn node_to_own_pod(&self, side: usize, src: PointId, dst: PointId) -> bool {
        let hosts = &self.hosts[side];
        matches!(
            (hosts[src as usize], hosts[dst as usize]),
            (Some((a, true)), Some((b, false))) if a == b
        )
    }

    /// Named ports of `point` on both sides, as a number (only read when
    /// some rule at hand names a port).
    fn named_ports(&self, point: PointId) -> u64 {
        self.keys.list(0, point, Direction::Ingress) as u64
            | (u64::from(self.keys.list(1, point, Direction::Ingress)) << 32)
    }

    fn names_ports(&self, rules: &[RuleAt]) -> bool {
        rules.iter().any(|at| {
            self.sides[at.side as usize].hosts[at.host as usize]
                .ruleset
                .compiled_rules()[at.rule as usize]
                .services
                .iter()
                .any(|s| matches!(s, ServiceMatch::Named { .. }))
        })
    }

    /// `points` split by `key`, in key order.
    fn split<K: Ord>(points: &[PointId], key: impl Fn(PointId) -> K) -> Vec<Vec<PointId>> {
        let mut groups: BTreeMap<K, Vec<PointId>> = BTreeMap::new();
        for &p in points {
            groups.entry(key(p)).or_default().push(p);
        }
        groups.into_values().collect()
    }

    /// Where `rules` cut the transport of flows to `dst` (named ports
    /// resolved on each rule's side).
    fn cuts(&self, rules: &[RuleAt], dst: PointId) -> Cuts {
        let ip = self.universe.points[dst as usize].rep;
        let mut cuts = Cuts::default();
        for at in rules {
            let ruleset = &self.sides[at.side as usize].hosts[at.host as usize].ruleset;
            let rule = &ruleset.compiled_rules()[at.rule as usize];
            let named = |name: &str, protocol| {
                self.sides[at.side as usize]
                    .ruleset_of(ip)
                    .and_then(|(_, r)| r.named_port(ip, name, protocol))
            };
            for range in rule.field_ranges(ip, named) {
                cuts.add(range);
            }
        }
        cuts
    }

    fn flow(&self, src: PointId, dst: PointId, atom: &Atom) -> Flow {
        Flow {
            src: self.universe.points[src as usize].rep,
            dst: self.universe.points[dst as usize].rep,
            transport: atom.transport(),
            local: None,
        }
    }

    /// One end changed (`direction`'s lists of each of `changed`),
    /// against every point at the other end whose lists did not
    /// (`other_changed` marks those that did).
    ///
    /// Neither end is split by Namespace here, only by what decides: the
    /// pairs found changed are split by Namespace for the report in
    /// [`Engine::pieces`], so the work follows the distinct rule lists and
    /// peer sets, not the Namespaces.
    fn one_end(&mut self, changed: &[PointId], other_changed: &[bool], direction: Direction) {
        let groups = Self::split(changed, |p| {
            vec![
                u64::from(self.v6(p)),
                self.keys.list(0, p, direction) as u64,
                self.keys.list(1, p, direction) as u64,
            ]
        });
        for group in groups {
            let rep = group[0];
            let v6 = self.v6(rep);
            let rules = self.rules(rep, direction);
            let names_ports = direction == Direction::Egress && self.names_ports(&rules);
            let others: Vec<PointId> = (0..self.universe.points.len() as PointId)
                .filter(|&p| {
                    !other_changed[p as usize]
                        && self.v6(p) == v6
                        && (direction == Direction::Egress || self.sends(p))
                })
                .collect();
            let mut candidate = vec![false; self.universe.points.len()];
            others.iter().for_each(|&p| candidate[p as usize] = true);
            let bits = peer_bits(self.sides, &self.universe, &rules, &candidate);
            let others = Self::split(&others, |p| {
                let (src, dst) = match direction {
                    Direction::Egress => (rep, p),
                    Direction::Ingress => (p, rep),
                };
                (
                    bits.get(&p),
                    self.node_to_own_pod(0, src, dst),
                    self.node_to_own_pod(1, src, dst),
                    if names_ports { self.named_ports(p) } else { 0 },
                )
            });
            for other in others {
                let (src, dst) = match direction {
                    Direction::Egress => (rep, other[0]),
                    Direction::Ingress => (other[0], rep),
                };
                let lookup = self.universe.lookup(dst);
                let changed_atoms: Vec<Atom> = self
                    .cuts(&rules, dst)
                    .atoms(v6)
                    .into_iter()
                    .filter(|atom| {
                        let flow = self.flow(src, dst, atom);
                        self.sides[0].direction(&flow, &lookup, direction)
                            != self.sides[1].direction(&flow, &lookup, direction)
                    })
                    .collect();
                if changed_atoms.is_empty() {
                    continue;
                }
                match direction {
                    Direction::Egress => self.whole(&group, &other, Some(&changed_atoms)),
                    Direction::Ingress => self.whole(&other, &group, Some(&changed_atoms)),
                }
            }
        }
    }

    /// Every flow from `srcs` to `dsts` (within `within`'s atoms, when
    /// given), each end split by every rule of the other end's lists on
    /// both sides, the transport cut at every boundary of them; a cell for
    /// each piece whose decision differs.
    fn whole(&mut self, srcs: &[PointId], dsts: &[PointId], within: Option<&[Atom]>) {
        let srcs: Vec<PointId> = srcs.iter().copied().filter(|&p| self.sends(p)).collect();
        let by_egress = Self::split(&srcs, |p| {
            vec![
                u64::from(self.v6(p)),
                self.keys.list(0, p, Direction::Egress) as u64,
                self.keys.list(1, p, Direction::Egress) as u64,
            ]
        });
        let by_ingress = Self::split(dsts, |p| {
            vec![
                u64::from(self.v6(p)),
                self.keys.list(0, p, Direction::Ingress) as u64,
                self.keys.list(1, p, Direction::Ingress) as u64,
            ]
        });
        for sg in &by_egress {
            for dg in &by_ingress {
                let (s_rep, d_rep) = (sg[0], dg[0]);
                if self.v6(s_rep) != self.v6(d_rep) {
                    continue;
                }
                let egress = self.rules(s_rep, Direction::Egress);
                let ingress = self.rules(d_rep, Direction::Ingress);
                self.pieces(sg, dg, &egress, &ingress, within);
            }
        }
    }

    /// [`Engine::whole`] for one group of sources sharing their egress
    /// lists and one of destinations sharing their ingress lists.
    fn pieces(
        &mut self,
        sg: &[PointId],
        dg: &[PointId],
        egress: &[RuleAt],
        ingress: &[RuleAt],
        within: Option<&[Atom]>,
    ) {
        let (s_rep, d_rep) = (sg[0], dg[0]);
        let count = self.universe.points.len();
        let mut candidate = vec![false; count];
        sg.iter().for_each(|&p| candidate[p as usize] = true);
        let src_bits = peer_bits(self.sides, &self.universe, ingress, &candidate);
        let mut candidate = vec![false; count];
        dg.iter().for_each(|&p| candidate[p as usize] = true);
        let dst_bits = peer_bits(self.sides, &self.universe, egress, &candidate);
        let names_ports = self.names_ports(egress);
        let bits_key = |bits: &BTreeMap<PointId, Vec<u32>>, p: PointId| -> Key {
            bits.get(&p)
                .map(|b| b.iter().map(|&x| u64::from(x) + 16).collect())
                .unwrap_or_default()
        };
        let src_pieces = Self::split(sg, |p| {
            let mut key = bits_key(&src_bits, p);
            key.push(self.namespace(p));
            key.push(u64::from(self.node_to_own_pod(0, p, d_rep)));
            key.push(u64::from(self.node_to_own_pod(1, p, d_rep)));
            key
        });
        let dst_pieces = Self::split(dg, |p| {
            let mut key = bits_key(&dst_bits, p);
            key.push(self.namespace(p));
            key.push(u64::from(self.node_to_own_pod(0, s_rep, p)));
            key.push(u64::from(self.node_to_own_pod(1, s_rep, p)));
            if names_ports {
                key.push(self.named_ports(p));
            }
            key
        });
        let rules: Vec<RuleAt> = egress.iter().chain(ingress).copied().collect();
        let v6 = self.v6(s_rep);
        for ds in &dst_pieces {
            let atoms: Vec<Atom> = self
                .cuts(&rules, ds[0])
                .atoms(v6)
                .into_iter()
                .filter(|atom| within.is_none_or(|w| w.iter().any(|c| c.holds(atom))))
                .collect();
            if atoms.is_empty() {
                continue;
            }
            let lookup = self.universe.lookup(ds[0]);
            let mut found: Vec<(usize, Atom, Verdicts, Verdicts)> = Vec::new();
            for (i, ss) in src_pieces.iter().enumerate() {
                for atom in &atoms {
                    let flow = self.flow(ss[0], ds[0], atom);
                    let before = self.sides[0].decide(&flow, &lookup);
                    let after = self.sides[1].decide(&flow, &lookup);
                    if !before.same_effect(&after) {
                        found.push((i, *atom, before, after));
                    }
                }
            }
            if found.is_empty() {
                continue;
            }
            let dsts = self.set(ds);
            let mut srcs_ids: BTreeMap<usize, u32> = BTreeMap::new();
            for (i, atom, before, after) in found {
                let srcs = *srcs_ids
                    .entry(i)
                    .or_insert_with(|| self.set(&src_pieces[i]));
                self.cells.push(Cell {
                    srcs,
                    dsts,
                    atom,
                    before,
                    after,
                });
            }
        }
    }

    fn set(&mut self, points: &[PointId]) -> u32 {
        let mut points = points.to_vec();
        points.sort_unstable();
        self.sets.push(points);
        (self.sets.len() - 1) as u32
    }

    /// Whether `point` is a symbolic FQDN destination.
    pub fn is_fqdn(&self, point: PointId) -> bool {
        matches!(
            self.universe.points[point as usize].kind,
            PointKind::Fqdn(_)
        )
    }
}
