//! Policy YAML → `decode::parse_documents` → `validate` → `compile::compile`
//! → `classify`, the path every policy file takes in `tollgate run`.
//!
//! Input: the text of one policy file (the seed corpus holds the lab's
//! rule files and the Antrea spec examples, each with the lab inventory).
//! Flows are made from the addresses the text mentions (Pod, Node and
//! ipBlock addresses), so the classifier sees endpoints the ruleset knows.
//!
//! Invariants:
//! - loading and validation never panic, on any text;
//! - a snapshot that validates compiles, and `classify` is total and
//!   deterministic on every flow between those addresses (TCP, UDP, SCTP,
//!   ICMP, IGMP, other protocols), with or without learned FQDN addresses;
//! - the verdict is the egress verdict unless egress allows, then the
//!   ingress verdict; L7 constraints come only with an allow, and only
//!   from rules that carry them;
//! - every address `enforced()` lists is an endpoint of the ruleset;
//! - the verdict cache's premise: a decision the classifier calls
//!   `key_only` is the decision of every flow with its key (hook, source,
//!   protocol, destination port or ICMP type/code, destination), whatever
//!   the source port and whatever FQDN addresses are learned.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tollgate_core::compile::{compile, LocalNode};
use tollgate_core::packet::flow::{Flow, LocalSide, Transport, Verdict};
use tollgate_core::fqdn::{FqdnLookup, NoFqdn, StaticFqdn};
use tollgate_core::model::Snapshot;
use tollgate_core::decode::parse_documents;
use tollgate_core::validate::validate;

const MAX_ADDRESSES: usize = 6;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (objects, problems) = parse_documents(Path::new("fuzz.yaml"), text);
    let snapshot = Snapshot { objects };
    let invalid = validate(&snapshot);
    if !problems.is_empty() || !invalid.is_empty() {
        return;
    }
    let local = LocalNode {
        name: "tg-node".to_owned(),
        labels: Default::default(),
        addresses: vec![IpAddr::from([10, 99, 0, 1])],
    };
    let ruleset = compile(&snapshot, &local);
    for ip in &ruleset.enforced().endpoints {
        assert!(
            ruleset.endpoint_of(*ip).is_some(),
            "enforced {ip} is no endpoint"
        );
    }

    let mut addresses = addresses_in(text);
    addresses.extend([IpAddr::from([10, 99, 0, 1]), IpAddr::from([203, 0, 113, 7])]);
    let learned = StaticFqdn(
        ruleset
            .fqdn_patterns()
            .iter()
            .map(|p| p.as_str().replace('*', "x"))
            .flat_map(|name| addresses.iter().map(move |a| (name.clone(), *a)))
            .collect(),
    );
    for &src in &addresses {
        for &dst in &addresses {
            for (transport, local) in transports().into_iter().flat_map(|t| {
                [None, Some(LocalSide::Destination), Some(LocalSide::Source)].map(|l| (t, l))
            }) {
                let flow = Flow {
                    src,
                    dst,
                    transport,
                    local,
                };
                for fqdn in [&NoFqdn as &dyn FqdnLookup, &learned] {
                    let decision = ruleset.classify(&flow, fqdn);
                    if decision.key_only {
                        for other in [&NoFqdn as &dyn FqdnLookup, &learned] {
                            let same_key = Flow {
                                transport: other_source_port(flow.transport),
                                ..flow
                            };
                            let again = ruleset.classify(&same_key, other);
                            assert_eq!(
                                (again.verdict, again.key_only),
                                (decision.verdict, true),
                                "{flow:?}: a key-only decision differs for {same_key:?}"
                            );
                        }
                    }
                    assert_eq!(decision, ruleset.classify(&flow, fqdn), "not deterministic");
                    let expected = match decision.egress.verdict() {
                        Verdict::Allow => decision.ingress.verdict(),
                        denied => denied,
                    };
                    assert_eq!(decision.verdict, expected, "{flow:?}: {decision:?}");
                    if decision.verdict != Verdict::Allow {
                        assert!(decision.l7.is_empty(), "L7 constraints on a denied flow");
                    }
                    let carried = [&decision.egress, &decision.ingress]
                        .iter()
                        .filter_map(|d| d.rule())
                        .filter(|r| !r.l7.is_empty())
                        .count();
                    assert!(decision.l7.len() <= carried);
                    let _ = decision.deciding();
                }
            }
        }
    }
});

/// The same transport from another source port (the key leaves it out).
fn other_source_port(transport: Transport) -> Transport {
    match transport {
        Transport::Tcp { dst_port, .. } => Transport::Tcp {
            src_port: 51000,
            dst_port,
        },
        Transport::Udp { dst_port, .. } => Transport::Udp {
            src_port: 51000,
            dst_port,
        },
        Transport::Sctp { dst_port, .. } => Transport::Sctp {
            src_port: 51000,
            dst_port,
        },
        other => other,
    }
}

fn transports() -> [Transport; 7] {
    [
        Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        Transport::Tcp {
            src_port: 40001,
            dst_port: 8080,
        },
        Transport::Udp {
            src_port: 40002,
            dst_port: 53,
        },
        Transport::Sctp {
            src_port: 40003,
            dst_port: 3868,
        },
        Transport::Icmp {
            icmp_type: 8,
            icmp_code: 0,
        },
        Transport::Igmp {
            igmp_type: 0x16,
            group: Ipv4Addr::new(225, 1, 2, 3),
        },
        Transport::Other { number: 47 },
    ]
}

/// Addresses written in the text (bare or as a CIDR's base), at most a few.
fn addresses_in(text: &str) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for token in text.split(|c: char| !(c.is_ascii_hexdigit() || c == '.' || c == ':')) {
        let token = token.trim_matches(|c| c == ':' || c == '.');
        if let Ok(ip) = token.parse::<IpAddr>() {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
        if out.len() == MAX_ADDRESSES {
            break;
        }
    }
    out
}
