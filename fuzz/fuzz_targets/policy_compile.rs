//! Policy YAML → `source::parse_documents` → `validate` → `compile::compile`
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
//! - every address `enforced()` lists is an endpoint of the ruleset.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tollgate::compile::{compile, LocalNode};
use tollgate::packet::flow::{Flow, Transport, Verdict};
use tollgate::fqdn::{FqdnLookup, NoFqdn, StaticFqdn};
use tollgate::model::Snapshot;
use tollgate::source::parse_documents;
use tollgate::validate::validate;

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
            for transport in transports() {
                let flow = Flow {
                    src,
                    dst,
                    transport,
                    local: None,
                };
                for fqdn in [&NoFqdn as &dyn FqdnLookup, &learned] {
                    let decision = ruleset.classify(&flow, fqdn);
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
