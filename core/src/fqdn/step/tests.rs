//! The DNS step driven by the replies recorded from dnsmasq in
//! `tests/data/dns/` (see its README), snooped from UDP and TCP packets.

use std::net::IpAddr;
use std::time::Instant;

use etherparse::PacketBuilder;

use super::*;
use crate::fqdn::{DnsSnooper, Expired, LearnerConfig, OutstandingQueries, QueryBounds};

const SERVER: [u8; 4] = [10, 0, 0, 53];
const CLIENT: [u8; 4] = [10, 0, 0, 7];

fn recorded(file: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/dns/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn table(patterns: &[&str], config: LearnerConfig) -> FqdnTable {
    let selectors = patterns.iter().map(|p| FqdnPattern::new(p)).collect();
    FqdnTable::restore(selectors, config, &[], Instant::now()).0
}

fn snooper() -> DnsSnooper {
    DnsSnooper::new(Vec::new(), 4, 4096)
}

/// The recorded reply `file` in a UDP packet from the server, snooped.
fn udp(file: &str) -> Snooped {
    let mut packet = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .udp(53, 40000)
        .write(&mut packet, &recorded(file))
        .unwrap();
    snooper().snoop(&packet)
}

/// `snooped` through the step as the answer to the queries its replies
/// answer, each asked just before.
fn answered(t: &FqdnTable, snooped: &Snooped, now_ms: u64) -> DnsStep {
    let mut queries = OutstandingQueries::new(QueryBounds::default());
    if let Some(flow) = snooped.flow {
        for message in &snooped.messages {
            if let Ok(reply) = crate::dns::parse_reply(message) {
                queries.asked(&flow, reply.query().clone(), now_ms);
            }
        }
    }
    t.on_packet(snooped, &mut queries, now_ms)
}

fn tcp(seq: u32, syn: bool, payload: &[u8]) -> Vec<u8> {
    let mut builder = PacketBuilder::ipv4(SERVER, CLIENT, 64).tcp(53, 40000, seq, 64000);
    if syn {
        builder = builder.syn();
    }
    let mut out = Vec::new();
    builder.ack(1).write(&mut out, payload).unwrap();
    out
}

fn add(pattern: &str, address: &str, timeout_secs: u32) -> SetWrite {
    SetWrite::Add {
        pattern: FqdnPattern::new(pattern),
        address: address.parse().unwrap(),
        timeout_secs,
    }
}

fn ip(address: &str) -> IpAddr {
    address.parse().unwrap()
}

#[test]
fn a_recorded_answer_becomes_the_writes_of_the_selectors_it_matches() {
    let t = table(
        &["*github.com", "api.example.test"],
        LearnerConfig::default(),
    );
    let step = answered(&t, &udp("dnsmasq-www-github-a.bin"), 1_000);
    assert_eq!(
        step,
        DnsStep {
            writes: vec![add("*github.com", "192.0.2.44", 60)],
            release: Release::Accept,
            counts: DnsCounts {
                parsed: 1,
                outstanding: Some(0),
                learned: 1,
                addresses: Some(1),
                ..DnsCounts::default()
            },
        }
    );
    let github = FqdnPattern::new("*github.com");
    assert!(t.read().resolves_to(&github, ip("192.0.2.44"), 60_999));
    let six = answered(&t, &udp("dnsmasq-www-github-aaaa.bin"), 1_000);
    assert_eq!(six.writes, [add("*github.com", "2001:db8::44", 60)]);
}

#[test]
fn a_cname_chain_from_the_question_name_learns_every_address() {
    let t = table(&["api.example.test"], LearnerConfig::default());
    let step = answered(&t, &udp("dnsmasq-cdn-cname-two-a.bin"), 0);
    assert_eq!(
        step.writes,
        [
            add("api.example.test", "198.51.100.7", 60),
            add("api.example.test", "198.51.100.8", 60),
        ]
    );
}

#[test]
fn a_repeated_answer_refreshes_only_after_a_second() {
    let t = table(&["*github.com"], LearnerConfig::default());
    answered(&t, &udp("dnsmasq-www-github-a.bin"), 1_000);
    let soon = answered(&t, &udp("dnsmasq-www-github-a.bin"), 1_500);
    assert!(soon.writes.is_empty(), "{soon:?}");
    let later = answered(&t, &udp("dnsmasq-www-github-a.bin"), 3_000);
    assert_eq!(later.writes, [add("*github.com", "192.0.2.44", 60)]);
    assert_eq!((later.counts.learned, later.counts.refreshed), (0, 1));
}

#[test]
fn answers_no_selector_wants_and_nxdomain_write_nothing() {
    let t = table(&["*github.com"], LearnerConfig::default());
    let cdn = answered(&t, &udp("dnsmasq-cdn-cname-two-a.bin"), 0);
    assert_eq!(
        (cdn.writes.len(), cdn.counts.parsed, cdn.counts.addresses),
        (0, 1, Some(0))
    );
    let nx = answered(&t, &udp("dnsmasq-nxdomain.bin"), 0);
    assert_eq!(
        (
            nx.writes.len(),
            nx.counts.parsed,
            nx.counts.addresses,
            nx.release
        ),
        (0, 1, None, Release::Accept)
    );
}

#[test]
fn replies_the_snooper_cannot_learn_from_are_counted() {
    let t = table(&["*github.com"], LearnerConfig::default());
    let mut untrusted = DnsSnooper::new(vec![ip("10.0.0.1")], 4, 4096);
    let mut packet = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .udp(53, 40000)
        .write(&mut packet, &recorded("dnsmasq-www-github-a.bin"))
        .unwrap();
    let step = answered(&t, &untrusted.snoop(&packet), 0);
    assert_eq!(
        (step.counts.untrusted, step.counts.parsed, step.writes.len()),
        (1, 0, 0)
    );
    let garbage = answered(&t, &snooper().snoop(&[0x45, 0, 0]), 0);
    assert_eq!(
        (garbage.counts.failed, garbage.release),
        (1, Release::Accept)
    );
    let untracked = answered(&t, &snooper().snoop(&tcp(5, false, b"data")), 0);
    assert_eq!(untracked.counts.tcp_untracked, 1);
}

#[test]
fn malformed_replies_are_released_unchanged_and_counted() {
    let t = table(&["*github.com"], LearnerConfig::default());
    for file in [
        "compression-loop.bin",
        "pointer-forward.bin",
        "truncated-answer.bin",
        "huge-counts.bin",
    ] {
        let step = answered(&t, &udp(file), 0);
        assert_eq!(
            (
                step.writes.len(),
                step.release,
                step.counts.parsed,
                step.counts.failed
            ),
            (0, Release::Accept, 0, 1),
            "{file}"
        );
    }
}

#[test]
fn eviction_removes_what_the_kernel_holds() {
    let config = LearnerConfig {
        max_addresses: 1,
        ..LearnerConfig::default()
    };
    let t = table(&["*github.com", "api.example.test"], config);
    answered(&t, &udp("dnsmasq-www-github-a.bin"), 0);
    let step = answered(&t, &udp("dnsmasq-cdn-cname-two-a.bin"), 10);
    assert_eq!(
        step.writes,
        [
            SetWrite::Remove {
                pattern: FqdnPattern::new("*github.com"),
                address: ip("192.0.2.44"),
            },
            add("api.example.test", "198.51.100.8", 60),
        ]
    );
    assert_eq!(
        (
            step.counts.learned,
            step.counts.evicted,
            step.counts.addresses
        ),
        (1, 1, Some(1))
    );
}

#[test]
fn two_replies_on_one_tcp_connection_and_a_gap() {
    let t = table(
        &["*github.com", "api.example.test"],
        LearnerConfig::default(),
    );
    let mut s = snooper();
    let handshake = answered(&t, &s.snoop(&tcp(1000, true, &[])), 0);
    assert_eq!(
        (handshake.writes.len(), handshake.release),
        (0, Release::Accept)
    );
    let stream = recorded("dnsmasq-tcp-two-replies.bin");
    let step = answered(&t, &s.snoop(&tcp(1001, false, &stream)), 0);
    assert_eq!(step.counts.parsed, 2);
    assert_eq!(
        step.writes,
        [
            add("*github.com", "192.0.2.44", 60),
            add("api.example.test", "198.51.100.7", 60),
            add("api.example.test", "198.51.100.8", 60),
        ]
    );
    // Bytes after a gap: dropped for retransmission, nothing learned.
    let after_gap = answered(&t, &s.snoop(&tcp(9000, false, &stream)), 0);
    assert_eq!(
        (after_gap.writes.len(), after_gap.release),
        (0, Release::Drop)
    );
}

#[test]
fn expiry_forgets_entries_when_their_ttl_passes() {
    let t = table(&["*github.com"], LearnerConfig::default());
    answered(&t, &udp("dnsmasq-www-github-a.bin"), 1_000);
    assert_eq!(
        t.expire(60_999),
        Expired {
            expired: 0,
            addresses: 1
        }
    );
    assert_eq!(
        t.expire(61_000),
        Expired {
            expired: 1,
            addresses: 0
        }
    );
    let github = FqdnPattern::new("*github.com");
    assert!(!t.read().resolves_to(&github, ip("192.0.2.44"), 61_000));
}

/// The query the recorded reply `file` answers, in a UDP packet from the
/// client, snooped: the reply's bytes with QR cleared (its id and question
/// section are what the client sent), with `id` when given.
fn query_for(file: &str, id: Option<u16>) -> Snooped {
    let mut message = recorded(file);
    message[2] &= 0x7f;
    if let Some(id) = id {
        message[..2].copy_from_slice(&id.to_be_bytes());
    }
    let mut packet = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .udp(40000, 53)
        .write(&mut packet, &message)
        .unwrap();
    snooper().snoop(&packet)
}

#[test]
fn a_reply_teaches_only_as_the_answer_to_an_outstanding_query() {
    let t = table(&["*github.com"], LearnerConfig::default());
    let mut queries = OutstandingQueries::new(QueryBounds::default());
    let reply = udp("dnsmasq-www-github-a.bin");
    // Unasked: parsed, counted, not learned.
    let unasked = t.on_packet(&reply, &mut queries, 0);
    assert_eq!(
        (
            unasked.counts.parsed,
            unasked.counts.unasked,
            unasked.writes.len()
        ),
        (1, 1, 0)
    );
    // Another id on the same flow is still unasked.
    let other = t.on_packet(
        &query_for("dnsmasq-www-github-a.bin", Some(1)),
        &mut queries,
        0,
    );
    assert_eq!(
        (other.counts.queries, other.counts.outstanding),
        (1, Some(1))
    );
    assert_eq!(t.on_packet(&reply, &mut queries, 0).counts.unasked, 1);
    // Asked: the reply teaches once.
    let asked = t.on_packet(
        &query_for("dnsmasq-www-github-a.bin", None),
        &mut queries,
        0,
    );
    assert_eq!(
        (
            asked.counts.queries,
            asked.counts.outstanding,
            asked.writes.len()
        ),
        (1, Some(2), 0)
    );
    let answer = t.on_packet(&reply, &mut queries, 10);
    assert_eq!(answer.writes, [add("*github.com", "192.0.2.44", 60)]);
    assert_eq!(answer.counts.outstanding, Some(1));
    assert_eq!(t.on_packet(&reply, &mut queries, 20).counts.unasked, 1);
    // The same id asking another question: not the answer.
    let a = recorded("dnsmasq-www-github-a.bin");
    let aaaa = t.on_packet(
        &query_for(
            "dnsmasq-www-github-aaaa.bin",
            Some(u16::from_be_bytes([a[0], a[1]])),
        ),
        &mut queries,
        30,
    );
    assert_eq!(aaaa.counts.queries, 1);
    let step = t.on_packet(&reply, &mut queries, 40);
    assert_eq!((step.counts.other_question, step.writes.len()), (1, 0));
    // A query that is not one is counted, nothing remembered.
    let mut garbage = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .udp(40000, 53)
        .write(&mut garbage, &recorded("dnsmasq-www-github-a.bin"))
        .unwrap();
    let step = t.on_packet(&snooper().snoop(&garbage), &mut queries, 50);
    assert_eq!((step.counts.queries, step.counts.queries_failed), (0, 1));
}

#[test]
fn a_reply_on_the_wrong_path_is_counted_and_leaves_its_query_outstanding() {
    let t = table(&["*github.com"], LearnerConfig::default());
    let mut queries = OutstandingQueries::new(QueryBounds::default());
    t.on_packet(
        &query_for("dnsmasq-www-github-a.bin", None),
        &mut queries,
        0,
    );
    let mut packet = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .udp(53, 40000)
        .write(&mut packet, &recorded("dnsmasq-www-github-a.bin"))
        .unwrap();
    let forged = snooper().snoop_via(&packet, |_| crate::fqdn::ReplyPath {
        arrived: 4,
        route: Some(2),
    });
    let step = t.on_packet(&forged, &mut queries, 1);
    assert_eq!(
        (
            step.counts.wrong_interface,
            step.counts.parsed,
            step.writes.len(),
            step.release
        ),
        (1, 0, 0, Release::Accept)
    );
    // The genuine answer still teaches.
    let genuine = t.on_packet(&udp("dnsmasq-www-github-a.bin"), &mut queries, 2);
    assert_eq!(genuine.writes, [add("*github.com", "192.0.2.44", 60)]);
}
