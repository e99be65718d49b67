//! The proof that the diff is exact: for random policy sets A and B over
//! a small inventory, every flow of a universe (every endpoint address,
//! the ClusterIP, addresses at and beside every ipBlock boundary and a few
//! outside them, an address per FQDN selector; every protocol, ports and
//! source ports at and beside every rule boundary, ICMP types and codes,
//! IGMP types and groups) is decided by both sides, and the report must
//! hold exactly the flows whose decisions differ, each in one row, with
//! both decisions as the row says — no missed change, no false change.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use ipnet::IpNet;
use proptest::prelude::*;

use super::generate::{policy, INVENTORY};
use crate::compile::LocalNode;
use crate::decode::parse_documents;
use crate::fqdn::FqdnLookup;
use crate::model::Snapshot;
use crate::packet::flow::{Flow, Transport};
use crate::review::universe::PointLookup;
use crate::review::{diff, Change, Side, Verdicts};
use crate::validate::validate;

/// The side of `policies` (each valid alone with the inventory), or
/// `None` when together they do not validate.
fn side(policies: &[String]) -> Option<Side> {
    let text = std::iter::once(INVENTORY.to_string())
        .chain(policies.iter().cloned())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let (objects, problems) = parse_documents(Path::new("gen.yaml"), &text);
    let snapshot = Snapshot { objects };
    if !problems.is_empty() || !validate(&snapshot).is_empty() {
        return None;
    }
    Some(Side::compile(
        &snapshot,
        &LocalNode {
            name: "n1".into(),
            ..LocalNode::default()
        },
    ))
}

/// Whether a policy is valid with the inventory alone.
fn valid(policy: &str) -> bool {
    side(&[policy.to_string()]).is_some()
}

/// Names the templates: side A's `a0…`, B's new ones `b0…`.
fn named(templates: &[String], prefix: &str) -> Vec<String> {
    templates
        .iter()
        .enumerate()
        .map(|(i, t)| t.replace("NAME", &format!("{prefix}{i}")))
        .filter(|p| valid(p))
        .collect()
}

/// Addresses beside every block boundary of the texts, and a few others.
fn addresses(texts: &[String]) -> Vec<IpAddr> {
    let mut out: BTreeSet<IpAddr> = BTreeSet::new();
    for text in texts {
        for token in text.split(|c: char| c.is_whitespace() || "{}[],\"".contains(c)) {
            if let Ok(net) = token.parse::<IpNet>() {
                for ip in [net.network(), net.broadcast()] {
                    out.insert(ip);
                    out.extend(step(ip, -1));
                    out.extend(step(ip, 1));
                }
            }
        }
    }
    for extra in [
        "0.0.0.0",
        "255.255.255.255",
        "8.8.8.8",
        "10.0.0.3",
        "10.1.0.9",
        "10.96.0.10",
        "192.168.5.5",
        "::",
        "2001:db8::1",
        "fd00:1::9",
    ] {
        out.insert(extra.parse().unwrap());
    }
    out.into_iter().collect()
}

fn step(ip: IpAddr, by: i8) -> Option<IpAddr> {
    match ip {
        IpAddr::V4(v4) => u32::from(v4)
            .checked_add_signed(i32::from(by))
            .map(|n| IpAddr::V4(Ipv4Addr::from(n))),
        IpAddr::V6(v6) => u128::from(v6)
            .checked_add_signed(i128::from(by))
            .map(|n| IpAddr::V6(n.into())),
    }
}

fn transports() -> Vec<Transport> {
    let mut out = Vec::new();
    let dst_ports = [
        1, 52, 53, 54, 79, 80, 81, 89, 90, 91, 443, 8080, 9, 30080, 65535,
    ];
    let src_ports = [1, 999, 1000, 1500, 2000, 2001, 65535];
    for &dst_port in &dst_ports {
        for &src_port in &src_ports {
            out.push(Transport::Tcp { src_port, dst_port });
            out.push(Transport::Udp { src_port, dst_port });
        }
        out.push(Transport::Sctp {
            src_port: 40000,
            dst_port,
        });
    }
    out.push(Transport::Sctp {
        src_port: 1500,
        dst_port: 80,
    });
    for icmp_type in [0, 7, 8, 9, 128, 255] {
        for icmp_code in [0, 1, 255] {
            out.push(Transport::Icmp {
                icmp_type,
                icmp_code,
            });
        }
    }
    for igmp_type in [0x11, 22, 23] {
        for group in ["225.1.2.3", "225.1.2.4", "0.0.0.0"] {
            out.push(Transport::Igmp {
                igmp_type,
                group: group.parse().unwrap(),
            });
        }
    }
    out.push(Transport::Other { number: 47 });
    out.push(Transport::Other { number: 50 });
    out
}

/// What a row's names mean, against both sides' inventories.
struct Resolver {
    /// Every address some endpoint of either side has, and its name.
    names: std::collections::HashMap<IpAddr, String>,
    cluster_ips: BTreeSet<IpAddr>,
}

/// A row's `from` or `to` label, read once per report (not per flow
/// probed: a large case probes tens of thousands of flows).
enum Label<'a> {
    Fqdn(&'a str),
    /// `name[address]`.
    Address(&'a str, Option<IpAddr>),
    Net(IpNet),
    Name(&'a str),
}

impl<'a> Label<'a> {
    fn of(label: &'a str) -> Label<'a> {
        if let Some(pattern) = label.strip_prefix("fqdn:") {
            return Label::Fqdn(pattern);
        }
        if let Some((name, address)) = label.strip_suffix(']').and_then(|l| l.split_once('[')) {
            return Label::Address(name, address.parse().ok());
        }
        match label.parse::<IpNet>() {
            Ok(net) => Label::Net(net),
            Err(_) => Label::Name(label),
        }
    }
}

/// A report row with its labels read.
struct Row<'a> {
    change: &'a Change,
    from: Vec<Label<'a>>,
    to: Vec<Label<'a>>,
}

impl<'a> Row<'a> {
    fn of(change: &'a Change) -> Row<'a> {
        Row {
            change,
            from: change.from.iter().map(|l| Label::of(l)).collect(),
            to: change.to.iter().map(|l| Label::of(l)).collect(),
        }
    }
}

impl Resolver {
    fn covers(&self, label: &Label<'_>, ip: IpAddr, fqdn: Option<&str>) -> bool {
        match (label, fqdn) {
            (Label::Fqdn(pattern), _) => fqdn == Some(*pattern),
            (_, Some(_)) => false,
            (Label::Address(name, address), None) => {
                self.names.get(&ip).map(String::as_str) == Some(*name) && *address == Some(ip)
            }
            (Label::Net(net), None) => {
                if !net.contains(&ip) || self.names.contains_key(&ip) {
                    return false;
                }
                let host = net.prefix_len() == net.max_prefix_len();
                !self.cluster_ips.contains(&ip) || host
            }
            (Label::Name(name), None) => self.names.get(&ip).map(String::as_str) == Some(*name),
        }
    }
}

fn within(spec: &str, value: u32) -> bool {
    match spec.split_once('-') {
        Some((lo, hi)) => {
            let parse = |s: &str| -> u32 {
                s.parse::<u32>()
                    .ok()
                    .or_else(|| s.parse::<Ipv4Addr>().ok().map(u32::from))
                    .unwrap()
            };
            (parse(lo)..=parse(hi)).contains(&value)
        }
        None => {
            spec.parse::<u32>().ok() == Some(value)
                || spec.parse::<Ipv4Addr>().ok().map(u32::from) == Some(value)
        }
    }
}

/// Whether one entry of `ports` (`type T code C`, `group G`, …) holds.
fn port_entry(entry: &str, first: u32, second: u32, second_word: &str) -> bool {
    if entry == "any" {
        return true;
    }
    let words: Vec<&str> = entry.split(' ').collect();
    let mut ok = true;
    for pair in words.chunks(2) {
        match pair {
            ["type", v] => ok &= within(v, first),
            [w, v] if *w == second_word => ok &= within(v, second),
            _ => panic!("unexpected ports entry {entry:?}"),
        }
    }
    ok
}

fn row_covers(read: &Row<'_>, r: &Resolver, flow: &Flow, fqdn: Option<&str>) -> bool {
    let row = read.change;
    if let Some(family) = &row.family {
        if (family == "IPv6") != flow.src.is_ipv6() {
            return false;
        }
    }
    if !read.from.iter().any(|l| r.covers(l, flow.src, None))
        || !read.to.iter().any(|l| r.covers(l, flow.dst, fqdn))
    {
        return false;
    }
    if row.protocol == "any" {
        return true;
    }
    if row.protocol != flow.transport.name() {
        return false;
    }
    match flow.transport {
        Transport::Tcp { src_port, dst_port }
        | Transport::Udp { src_port, dst_port }
        | Transport::Sctp { src_port, dst_port } => {
            row.ports.iter().any(|p| within(p, dst_port.into()))
                && (row.source_ports.is_empty()
                    || row.source_ports.iter().any(|p| within(p, src_port.into())))
        }
        Transport::Icmp {
            icmp_type,
            icmp_code,
        } => row
            .ports
            .iter()
            .any(|p| port_entry(p, icmp_type.into(), icmp_code.into(), "code")),
        Transport::Igmp { igmp_type, group } => row
            .ports
            .iter()
            .any(|p| port_entry(p, igmp_type.into(), u32::from(group), "group")),
        Transport::Other { .. } => true,
    }
}

fn check(before: &Side, after: &Side, texts: &[String]) -> Result<usize, TestCaseError> {
    let report = diff(before, after, false);
    let expanded = diff(before, after, true);
    prop_assert_eq!(
        expanded.changes.len() >= report.changes.len(),
        true,
        "expanding never loses a row"
    );
    let mut names = std::collections::HashMap::new();
    for side in [after, before] {
        for nodes in [false, true] {
            for (name, info) in side.endpoints() {
                if name.starts_with("node:") == nodes {
                    for &ip in &info.addresses {
                        names.entry(ip).or_insert_with(|| name.clone());
                    }
                }
            }
        }
    }
    let mut cluster_ips = BTreeSet::new();
    for side in [before, after] {
        for ruleset in side.rulesets() {
            for rule in ruleset.compiled_rules() {
                cluster_ips.extend(rule.peers.services.iter().map(|s| s.0));
            }
        }
    }
    let resolver = Resolver { names, cluster_ips };
    let read_report: Vec<Row<'_>> = report.changes.iter().map(Row::of).collect();
    let read_expanded: Vec<Row<'_>> = expanded.changes.iter().map(Row::of).collect();
    let mut universe = addresses(texts);
    universe.extend(resolver.names.keys().copied());
    universe.sort();
    universe.dedup();
    // An address per FQDN selector and family, outside every block.
    let blocks: Vec<IpNet> = texts
        .iter()
        .flat_map(|t| {
            t.split(|c: char| c.is_whitespace() || "{}[],\"".contains(c))
                .filter_map(|w| w.parse::<IpNet>().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    let outside = |candidates: &[&str]| {
        candidates
            .iter()
            .map(|c| c.parse::<IpAddr>().unwrap())
            .find(|ip| !blocks.iter().any(|b| b.contains(ip)) && !resolver.names.contains_key(ip))
    };
    let fqdn_addresses: Vec<IpAddr> = [
        outside(&["198.51.100.77", "100.64.9.9", "172.31.255.254"]),
        outside(&["2001:db8:ffff::77", "3fff::1"]),
    ]
    .into_iter()
    .flatten()
    .collect();
    let patterns: BTreeSet<String> = [before, after]
        .iter()
        .flat_map(|s| s.rulesets())
        .flat_map(|r| r.fqdn_patterns().iter().map(|p| p.as_str().to_string()))
        .collect();
    let mut changed = 0;
    let transports = transports();
    let mut probe = |flow: Flow, fqdn: Option<&str>, lookup: &dyn FqdnLookup| {
        let a: Verdicts = before.decide(&flow, lookup);
        let b: Verdicts = after.decide(&flow, lookup);
        for (report, read) in [(&report, &read_report), (&expanded, &read_expanded)] {
            let rows: Vec<&Change> = read
                .iter()
                .filter(|row| row_covers(row, &resolver, &flow, fqdn))
                .map(|row| row.change)
                .collect();
            prop_assert!(
                rows.len() <= 1,
                "{flow:?} ({fqdn:?}) in several rows: {rows:#?}"
            );
            match rows.first() {
                None => prop_assert!(
                    a.same_effect(&b),
                    "missed change {flow:?} ({fqdn:?}): {a:?} -> {b:?}\n{report:#?}"
                ),
                Some(row) => {
                    prop_assert!(
                        !a.same_effect(&b),
                        "false change {flow:?} ({fqdn:?}) in {row:#?}"
                    );
                    prop_assert_eq!(&row.before.verdict, &a.verdict.to_string());
                    prop_assert_eq!(&row.after.verdict, &b.verdict.to_string());
                    prop_assert_eq!(&row.before.rule, &a.rule, "{:?}", flow);
                    prop_assert_eq!(&row.after.rule, &b.rule, "{:?}", flow);
                    prop_assert_eq!(row.before.l7.len(), a.l7.len());
                    prop_assert_eq!(row.after.l7.len(), b.l7.len());
                }
            }
        }
        if !a.same_effect(&b) {
            changed += 1;
        }
        Ok(())
    };
    for &src in &universe {
        for transport in &transports {
            for &dst in &universe {
                if src.is_ipv6() != dst.is_ipv6()
                    || (dst.is_ipv6() && matches!(transport, Transport::Igmp { .. }))
                {
                    continue;
                }
                let flow = Flow {
                    src,
                    dst,
                    transport: *transport,
                    local: None,
                };
                probe(flow, None, &PointLookup(None))?;
            }
            for &dst in &fqdn_addresses {
                if src.is_ipv6() != dst.is_ipv6()
                    || (dst.is_ipv6() && matches!(transport, Transport::Igmp { .. }))
                {
                    continue;
                }
                for pattern in &patterns {
                    let flow = Flow {
                        src,
                        dst,
                        transport: *transport,
                        local: None,
                    };
                    probe(
                        flow,
                        Some(pattern),
                        &PointLookup(Some((pattern.as_str(), dst))),
                    )?;
                }
            }
        }
    }
    Ok(changed)
}

/// A policy's dry-run annotation added, or removed.
fn toggle_dry_run(policy: &str) -> String {
    const ANNOTATION: &str = "annotations: {tollgate.io/dry-run: \"true\"}, ";
    if policy.contains(ANNOTATION) {
        policy.replacen(ANNOTATION, "", 1)
    } else {
        policy.replacen("metadata: {", &format!("metadata: {{{ANNOTATION}"), 1)
    }
}

/// Side B from side A: independent, A with one policy removed and/or one
/// added, or A with one policy put in or taken out of dry-run.
fn sides() -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    (
        prop::collection::vec(policy(), 0..4),
        prop::collection::vec(policy(), 0..3),
        0..4u8,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(a, extra, mode, drop)| {
            let a = named(&a, "a");
            let extra = named(&extra, "b");
            let b = match mode {
                0 => extra,
                3 if !a.is_empty() => {
                    let mut b = a.clone();
                    let i = drop.index(b.len());
                    b[i] = toggle_dry_run(&b[i]);
                    b
                }
                _ => {
                    let mut b = a.clone();
                    if mode == 1 && !b.is_empty() {
                        b.remove(drop.index(b.len()));
                    }
                    b.extend(extra.into_iter().take(1));
                    b
                }
            };
            (a, b)
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(12),
        max_global_rejects: 4096,
        ..ProptestConfig::default()
    })]

    /// Mutation: leaving the source ports out of the transport cuts
    /// (`FieldRange::SrcPort` never added) merges flows a `sourcePort`
    /// tells apart: the test reports a false change (tried: it fails).
    #[test]
    fn the_diff_holds_every_changed_flow_and_no_other((a, b) in sides()) {
        let (Some(before), Some(after)) = (side(&a), side(&b)) else {
            return Err(TestCaseError::reject("the policies do not validate together"));
        };
        let texts: Vec<String> = a.iter().chain(&b).cloned().collect();
        check(&before, &after, &texts)?;
    }
}

/// The generator makes policies that validate, of every kind.
#[test]
fn the_generator_makes_valid_policies_of_every_kind() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut kinds = std::collections::BTreeMap::<String, (usize, usize)>::new();
    for _ in 0..400 {
        let template = policy().new_tree(&mut runner).unwrap().current();
        let field = |key: &str| {
            template
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap()
                .to_string()
        };
        let kind = format!("{}/{}", field("apiVersion: "), field("kind: "));
        let entry = kinds.entry(kind).or_default();
        entry.0 += 1;
        if valid(&template.replace("NAME", "p")) {
            entry.1 += 1;
        }
    }
    for (kind, (made, ok)) in &kinds {
        assert!(*ok * 3 >= *made, "{kind}: only {ok} of {made} valid");
    }
    assert_eq!(kinds.len(), 6, "{kinds:?}");
}
