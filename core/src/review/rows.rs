//! From the engine's cells to the rows of a report: a cell's transport
//! pieces merged into ports and ranges, then rows sharing everything but
//! their destinations merged, then those sharing everything but their
//! sources — each step a union of Cartesian products with one before and
//! one after, so every row stays exact. Points become names here; the
//! protocols of a change that covers all of them become `any`, and the
//! two address families one row where they agree.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use super::engine::Engine;
use super::fields::{describe, Atom, Protocol};
use super::report::{Change, Effect, Uncertain};
use super::side::Verdicts;
use super::universe::{PointId, PointKind};
use crate::model::L7Protocol;

/// One atom's decisions, before and after.
type Outcome = (Verdicts, Verdicts, Atom);

/// What rows merge by besides their key: family, protocol, ports and
/// source ports.
type Shape = (bool, Protocol, Vec<String>, Vec<String>);

/// A row before its points are named.
#[derive(Clone, Debug)]
struct Row {
    srcs: BTreeSet<PointId>,
    dsts: BTreeSet<PointId>,
    v6: bool,
    protocol: Protocol,
    ports: Vec<String>,
    sources: Vec<String>,
    before: Verdicts,
    after: Verdicts,
}

/// The changes the engine found, merged as far as they stay exact;
/// `expand`: one row per pair of names instead.
pub(crate) fn changes(engine: &Engine<'_>, expand: bool) -> Vec<Change> {
    // Cells of one pair of point sets and one outcome: their atoms.
    let mut pieces: BTreeMap<(u32, u32, Protocol), Vec<Outcome>> = BTreeMap::new();
    for cell in &engine.cells {
        pieces
            .entry((cell.srcs, cell.dsts, cell.atom.protocol))
            .or_default()
            .push((cell.before.clone(), cell.after.clone(), cell.atom));
    }
    let mut rows = Vec::new();
    for ((srcs, dsts, protocol), list) in pieces {
        let mut by_outcome: Vec<((Verdicts, Verdicts), Vec<Atom>)> = Vec::new();
        for (before, after, atom) in list {
            match by_outcome
                .iter_mut()
                .find(|((b, a), _)| *b == before && *a == after)
            {
                Some((_, atoms)) => atoms.push(atom),
                None => by_outcome.push(((before, after), vec![atom])),
            }
        }
        let srcs: BTreeSet<PointId> = engine.sets[srcs as usize].iter().copied().collect();
        let dsts: BTreeSet<PointId> = engine.sets[dsts as usize].iter().copied().collect();
        let v6 = engine.universe.points[*srcs.first().expect("a set is never empty") as usize]
            .rep
            .is_ipv6();
        for ((before, after), atoms) in by_outcome {
            for (ports, sources) in describe(protocol, &atoms) {
                rows.push(Row {
                    srcs: srcs.clone(),
                    dsts: dsts.clone(),
                    v6,
                    protocol,
                    ports,
                    sources,
                    before: before.clone(),
                    after: after.clone(),
                });
            }
        }
    }
    let namespace = |points: &BTreeSet<PointId>| {
        points
            .first()
            .and_then(|&p| engine.universe.points[p as usize].namespace.clone())
    };
    // Destinations of rows alike but for them, within one Namespace.
    let rows = merge(
        rows,
        |r| (r.srcs.clone(), namespace(&r.dsts)),
        |r| &mut r.dsts,
    );
    // Then sources.
    let rows = merge(
        rows,
        |r| (r.dsts.clone(), namespace(&r.srcs)),
        |r| &mut r.srcs,
    );
    let names = Names::new(engine);
    let mut named: Vec<Named> = rows
        .into_iter()
        .map(|row| {
            let fqdn = row.dsts.iter().any(|&p| engine.is_fqdn(p));
            Named {
                namespace: namespace(&row.dsts).or_else(|| namespace(&row.srcs)),
                from: names.labels(engine, &row.srcs, row.v6),
                to: names.labels(engine, &row.dsts, row.v6),
                family: Some(row.v6),
                protocol: row.protocol.as_str().to_string(),
                ports: row.ports,
                sources: row.sources,
                uncertain: if fqdn {
                    Some(Uncertain::Dns)
                } else if !row.before.l7.is_empty() || !row.after.l7.is_empty() {
                    Some(Uncertain::L7)
                } else {
                    None
                },
                before: row.before,
                after: row.after,
            }
        })
        .collect();
    named = any_protocol(named);
    named = both_families(named);
    let mut changes: Vec<Change> = named.into_iter().map(|n| n.into_change(&names)).collect();
    if expand {
        changes = changes
            .into_iter()
            .flat_map(|change| {
                let mut out = Vec::new();
                for from in &change.from {
                    for to in &change.to {
                        out.push(Change {
                            from: vec![from.clone()],
                            to: vec![to.clone()],
                            ..change.clone()
                        });
                    }
                }
                out
            })
            .collect();
    }
    changes
}

/// Merges rows equal in everything but the set `field` returns, and in
/// `key`, into one row holding the union of those sets.
fn merge<K: Ord>(
    rows: Vec<Row>,
    key: impl Fn(&Row) -> K,
    field: impl Fn(&mut Row) -> &mut BTreeSet<PointId>,
) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    let mut index: BTreeMap<(K, Shape), Vec<usize>> = BTreeMap::new();
    for mut row in rows {
        let k = (
            key(&row),
            (row.v6, row.protocol, row.ports.clone(), row.sources.clone()),
        );
        let slots = index.entry(k).or_default();
        let found = slots
            .iter()
            .copied()
            .find(|&i| out[i].before == row.before && out[i].after == row.after);
        match found {
            Some(i) => {
                let taken = std::mem::take(field(&mut row));
                field(&mut out[i]).extend(taken);
            }
            None => {
                slots.push(out.len());
                out.push(row);
            }
        }
    }
    out
}

/// A row with its points named.
#[derive(Clone, Debug)]
struct Named {
    namespace: Option<String>,
    from: Vec<String>,
    to: Vec<String>,
    /// `Some(v6)` for one family, `None` for both.
    family: Option<bool>,
    protocol: String,
    ports: Vec<String>,
    sources: Vec<String>,
    uncertain: Option<Uncertain>,
    before: Verdicts,
    after: Verdicts,
}

impl Named {
    fn into_change(self, names: &Names) -> Change {
        // A family is worth naming only when both ends have the other too.
        let family = self
            .family
            .filter(|&v6| names.has_family(&self.from, !v6) && names.has_family(&self.to, !v6));
        Change {
            from: self.from,
            to: self.to,
            protocol: self.protocol,
            ports: self.ports,
            source_ports: self.sources,
            family: family.map(|v6| if v6 { "IPv6" } else { "IPv4" }.to_string()),
            before: effect(&self.before),
            after: effect(&self.after),
            uncertain: self.uncertain,
            namespace: self.namespace,
        }
    }
}

/// Rows alike but for their protocol, covering every protocol of the
/// family whole, as one row of protocol `any`.
fn any_protocol(rows: Vec<Named>) -> Vec<Named> {
    type Key = (
        Vec<String>,
        Vec<String>,
        Option<bool>,
        Verdicts,
        Verdicts,
        Option<Uncertain>,
    );
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let key = |r: &Named| -> Key {
        (
            r.from.clone(),
            r.to.clone(),
            r.family,
            r.before.clone(),
            r.after.clone(),
            r.uncertain,
        )
    };
    let mut keyed: Vec<(Key, Named)> = rows.into_iter().map(|r| (key(&r), r)).collect();
    for (i, (k, _)) in keyed.iter().enumerate() {
        groups.entry(format!("{k:?}")).or_default().push(i);
    }
    let mut drop = vec![false; keyed.len()];
    for members in groups.values() {
        let v6 = keyed[members[0]].1.family == Some(true);
        let whole = |protocol: Protocol| {
            members.iter().any(|&i| {
                let r = &keyed[i].1;
                r.protocol == protocol.as_str()
                    && r.sources.is_empty()
                    && match protocol {
                        Protocol::Tcp | Protocol::Udp | Protocol::Sctp => r.ports == ["1-65535"],
                        Protocol::Icmp | Protocol::Igmp => r.ports == ["any"],
                        Protocol::Ip => true,
                    }
            })
        };
        let every = Protocol::ALL
            .into_iter()
            .filter(|p| p.in_family(v6))
            .all(whole);
        if every && members.len() == Protocol::ALL.iter().filter(|p| p.in_family(v6)).count() {
            for &i in &members[1..] {
                drop[i] = true;
            }
            let first = &mut keyed[members[0]].1;
            first.protocol = "any".to_string();
            first.ports = Vec::new();
        }
    }
    keyed
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|((_, r), _)| r)
        .collect()
}

/// Rows of the two families alike in everything else, as one.
fn both_families(rows: Vec<Named>) -> Vec<Named> {
    let mut out: Vec<Named> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for row in rows {
        let key = format!(
            "{:?}",
            (
                &row.from,
                &row.to,
                &row.protocol,
                &row.ports,
                &row.sources,
                &row.before,
                &row.after,
                row.uncertain
            )
        );
        match seen.get(&key) {
            Some(&i) if out[i].family.is_some() && out[i].family != row.family => {
                out[i].family = None
            }
            _ => {
                seen.insert(key, out.len());
                out.push(row);
            }
        }
    }
    out
}

fn effect(v: &Verdicts) -> Effect {
    Effect {
        verdict: v.verdict.to_string(),
        rule: v.rule.clone(),
        l7: v.l7.iter().map(l7_text).collect(),
    }
}

/// One rule's `l7Protocols`, alternatives separated by ` | `.
fn l7_text(protocols: &Arc<[L7Protocol]>) -> String {
    protocols
        .iter()
        .map(|p| match (&p.http, &p.tls) {
            (Some(http), _) => {
                let mut text = String::from("http");
                for (field, value) in [
                    ("method", &http.method),
                    ("host", &http.host),
                    ("path", &http.path),
                ] {
                    if let Some(v) = value {
                        text.push_str(&format!(" {field}={v}"));
                    }
                }
                if text == "http" {
                    text.push_str(" (any request)");
                }
                text
            }
            (None, Some(tls)) => match &tls.sni {
                Some(sni) => format!("tls sni={sni}"),
                None => "tls (any server name)".to_string(),
            },
            (None, None) => "(any)".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Names of addresses, the newer side's first, and the addresses of each
/// name.
struct Names {
    of: HashMap<IpAddr, String>,
    addresses: HashMap<String, Vec<IpAddr>>,
}

impl Names {
    fn new(engine: &Engine<'_>) -> Names {
        let mut of: HashMap<IpAddr, String> = HashMap::new();
        for side in [engine.sides[1], engine.sides[0]] {
            // Pods and ExternalEntities before Nodes (an ExternalEntity of
            // an ExternalNode is also one of the Node's addresses).
            for nodes in [false, true] {
                for (name, info) in side.endpoints() {
                    if name.starts_with("node:") == nodes {
                        for &ip in &info.addresses {
                            of.entry(ip).or_insert_with(|| name.clone());
                        }
                    }
                }
            }
        }
        let mut addresses: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (&ip, name) in &of {
            addresses.entry(name.clone()).or_default().push(ip);
        }
        Names { of, addresses }
    }

    /// The names of `points` (of one family), sorted: an endpoint by its
    /// name when all its addresses of the family are among them, else by
    /// name and address.
    fn labels(&self, engine: &Engine<'_>, points: &BTreeSet<PointId>, v6: bool) -> Vec<String> {
        let mut by_name: BTreeMap<&str, Vec<IpAddr>> = BTreeMap::new();
        let mut out = BTreeSet::new();
        for &p in points {
            let point = &engine.universe.points[p as usize];
            match &point.kind {
                PointKind::Address => match self.of.get(&point.rep) {
                    Some(name) => by_name.entry(name).or_default().push(point.rep),
                    None => {
                        out.insert(ipnet::IpNet::from(point.rep).to_string());
                    }
                },
                PointKind::External(nets) => out.extend(nets.iter().map(ToString::to_string)),
                PointKind::Fqdn(pattern) => {
                    out.insert(format!("fqdn:{pattern}"));
                }
            }
        }
        for (name, ips) in by_name {
            let all = self.addresses[name]
                .iter()
                .filter(|ip| ip.is_ipv6() == v6)
                .count();
            if ips.len() == all {
                out.insert(name.to_string());
            } else {
                out.extend(ips.iter().map(|ip| format!("{name}[{ip}]")));
            }
        }
        out.into_iter().collect()
    }

    /// Whether some of `labels` has addresses of the family (`v6`).
    fn has_family(&self, labels: &[String], v6: bool) -> bool {
        labels.iter().any(|label| {
            if label.starts_with("fqdn:") {
                return true;
            }
            match self.addresses.get(label.as_str()) {
                Some(ips) => ips.iter().any(|ip| ip.is_ipv6() == v6),
                None => false,
            }
        })
    }
}
