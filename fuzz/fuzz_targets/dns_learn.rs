//! DNS reply bytes → learned addresses, through every path a reply takes:
//! `tollgate_core::dns::parse_reply` and `resolved`, the `FqdnLearner`, the TCP
//! framing of `TcpStreamReassembler`, and the `DnsSnooper` reading UDP and
//! TCP packets from a DNS server.
//!
//! Input: 8 control bytes, then one DNS message (the seed corpus holds
//! replies recorded from dnsmasq and hand-made hostile ones: compression
//! loops, forward pointers, CNAME loops, lying counts). The control bytes
//! choose IPv4/IPv6, whether two replies are pipelined on one TCP
//! connection, a small message bound, and seed the segmentation.
//!
//! Invariants:
//! - every address learned is an A/AAAA answer of class IN (checked with
//!   hickory's own parse as the oracle), and only under a selector that
//!   matches a name of its CNAME chain; every chain starts at a question,
//!   follows CNAME answers, has no repeated name and is bounded;
//! - within the learner's bounds, what is learned is exactly what resolved
//!   (a `*` selector ends up holding every resolved address), and all of
//!   it expires;
//! - TCP framing is split-invariant: any segmentation, with retransmitted
//!   overlaps and reordered segments, yields the messages of a one-shot
//!   push; the snooper yields the same messages from packets, drops the
//!   segment after a gap until the missing one arrives, and forgets the
//!   connection on FIN.
#![no_main]

use std::collections::BTreeSet;
use std::net::IpAddr;

use etherparse::PacketBuilder;
use hickory_proto::op::Message;
use hickory_proto::rr::{DNSClass, Name, RData};
use libfuzzer_sys::fuzz_target;
use tollgate_core::dns::{parse_reply, Framed, TcpStreamReassembler, MAX_CNAME_CHAIN};
use tollgate_core::fqdn::{
    DnsSnooper, FqdnLearner, FqdnPattern, IpsetChange, LearnerConfig, Release, SnoopEvent,
    MAX_IPSET_TIMEOUT_SECS,
};

const CONTROL: usize = 8;
const NOW_MS: u64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    if data.len() < CONTROL {
        return;
    }
    let (control, message) = data.split_at(CONTROL);
    learn(message);
    let mut rng = Rng::new(control);
    let flags = control[0];
    let mut stream = framed(message);
    if flags & 2 != 0 {
        stream.extend(framed(message));
    }
    let max_message = if flags & 4 != 0 {
        message.len().saturating_sub(1)
    } else {
        16 * 1024
    };
    reassembler(&stream, max_message, &mut rng);
    snooper(message, &stream, max_message, flags & 1 != 0, &mut rng);
});

/// The answers as hickory reads them: the oracle.
struct Answers {
    questions: BTreeSet<String>,
    addresses: BTreeSet<IpAddr>,
    cnames: BTreeSet<(String, String)>,
}

fn answers(message: &[u8]) -> Option<Answers> {
    let message = Message::from_vec(message).ok()?;
    let mut out = Answers {
        questions: message.queries.iter().map(|q| text(&q.name)).collect(),
        addresses: BTreeSet::new(),
        cnames: BTreeSet::new(),
    };
    for record in message
        .answers
        .iter()
        .filter(|r| r.dns_class == DNSClass::IN)
    {
        match &record.data {
            RData::A(a) => {
                out.addresses.insert(IpAddr::V4(a.0));
            }
            RData::AAAA(a) => {
                out.addresses.insert(IpAddr::V6(a.0));
            }
            RData::CNAME(c) => {
                out.cnames.insert((text(&record.name), text(&c.0)));
            }
            _ => {}
        }
    }
    Some(out)
}

fn text(name: &Name) -> String {
    let mut text = name.to_ascii();
    if text.ends_with('.') {
        text.pop();
    }
    text.make_ascii_lowercase();
    text
}

fn learn(message: &[u8]) {
    let Ok(reply) = parse_reply(message) else {
        return;
    };
    let oracle = answers(message).expect("tollgate parsed a message hickory rejects");
    assert_eq!(
        reply.questions().iter().cloned().collect::<BTreeSet<_>>(),
        oracle.questions
    );
    let resolved = reply.resolved();
    for resolution in &resolved {
        let names = &resolution.names;
        assert!(
            oracle.questions.contains(&names[0]),
            "chain starts off-question: {names:?}"
        );
        assert!(
            names.len() <= MAX_CNAME_CHAIN + 1,
            "chain too long: {}",
            names.len()
        );
        assert_eq!(
            names.iter().collect::<BTreeSet<_>>().len(),
            names.len(),
            "loop: {names:?}"
        );
        for link in names.windows(2) {
            assert!(
                oracle.cnames.contains(&(link[0].clone(), link[1].clone())),
                "chain link {link:?} is not a CNAME answer"
            );
        }
        assert!(
            oracle.addresses.contains(&resolution.address),
            "{resolution:?} not answered"
        );
    }

    // Selectors that match: each question and alias exactly, their parent
    // domains as suffix wildcards, and `*`.
    let mut patterns: BTreeSet<String> = BTreeSet::from(["*".to_owned()]);
    for name in oracle
        .questions
        .iter()
        .chain(oracle.cnames.iter().map(|(_, t)| t))
        .take(6)
    {
        patterns.insert(name.clone());
        if let Some((_, parent)) = name.split_once('.') {
            patterns.insert(format!("*.{parent}"));
        }
    }
    let selectors: Vec<FqdnPattern> = patterns.iter().map(|p| FqdnPattern::new(p)).collect();
    let config = LearnerConfig {
        min_ttl_secs: 5,
        max_ttl_secs: 600,
        max_addresses_per_name: 64,
        max_addresses: 256,
    };
    let mut learner = FqdnLearner::new(selectors.clone(), config);
    let changes = learner
        .learn_reply(message, NOW_MS)
        .expect("parsed once, parses again");
    let within_bounds =
        resolved.len() <= 64 && resolved.iter().map(|r| r.names.len()).sum::<usize>() <= 256;
    for change in &changes {
        match *change {
            IpsetChange::Add {
                selector,
                address,
                timeout_secs,
            } => {
                assert!(
                    oracle.addresses.contains(&address),
                    "learned unanswered {address}"
                );
                assert!((5..=600).contains(&timeout_secs));
                let pattern = &selectors[selector];
                assert!(
                    resolved
                        .iter()
                        .filter(|r| r.address == address)
                        .any(|r| r.names.iter().any(|n| pattern.matches_normalized(n))),
                    "{address} learned for {pattern} which matches none of its names"
                );
            }
            IpsetChange::Remove { .. } => {
                assert!(
                    !within_bounds,
                    "fresh learner removed {change:?} within its bounds"
                )
            }
        }
    }
    if within_bounds {
        for pattern in &selectors {
            for address in &oracle.addresses {
                let expected = resolved
                    .iter()
                    .filter(|r| r.address == *address)
                    .any(|r| r.names.iter().any(|n| pattern.matches_normalized(n)));
                assert_eq!(
                    learner.resolves_to(pattern, *address, NOW_MS),
                    expected,
                    "{pattern} → {address}"
                );
            }
        }
    }
    let horizon = NOW_MS + u64::from(MAX_IPSET_TIMEOUT_SECS) * 1000 + 1;
    learner.expire(horizon);
    assert_eq!(
        (learner.records(), learner.installed()),
        (0, 0),
        "records outlive their TTL"
    );
}

fn framed(message: &[u8]) -> Vec<u8> {
    let len = u16::try_from(message.len()).unwrap_or(u16::MAX);
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&message[..usize::from(len)]);
    out
}

fn one_shot(stream: &[u8], max_message: usize) -> Vec<Framed> {
    let mut whole = TcpStreamReassembler::new(max_message);
    whole.push(7, stream).expect("first push has no gap")
}

/// Segment boundaries chosen by the control bytes: mostly small.
fn segments(len: usize, rng: &mut Rng) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        let size = if rng.one_in(2) {
            1 + rng.next() % 8
        } else {
            1 + rng.next() % 600
        };
        let end = (at + size as usize).min(len);
        out.push((at, end));
        at = end;
    }
    out
}

fn reassembler(stream: &[u8], max_message: usize, rng: &mut Rng) {
    let expected = one_shot(stream, max_message);
    let isn: u32 = 0xffff_fff0; // sequence numbers wrap inside the stream
    let mut split = TcpStreamReassembler::new(max_message);
    split.push(isn, &[]).expect("empty first push");
    let mut got = Vec::new();
    let segs = segments(stream.len(), rng);
    for (i, &(start, end)) in segs.iter().enumerate() {
        let seq = |at: usize| isn.wrapping_add(at as u32);
        if let Some(&(next_start, next_end)) = segs.get(i + 1) {
            if rng.one_in(5) {
                // Reordered: the later segment leaves a gap and is refused.
                assert!(split
                    .push(seq(next_start), &stream[next_start..next_end])
                    .is_err());
            }
        }
        got.extend(
            split
                .push(seq(start), &stream[start..end])
                .expect("in-order segment"),
        );
        if rng.one_in(5) {
            // Retransmission overlapping what was already taken.
            let back = start - (rng.next() as usize % (start + 1));
            assert!(split
                .push(seq(back), &stream[back..end])
                .expect("overlap")
                .is_empty());
        }
        assert!(split.buffered() <= max_message);
    }
    assert_eq!(got, expected, "segmentation changed the framed messages");
}

fn snooper(message: &[u8], stream: &[u8], max_message: usize, v6: bool, rng: &mut Rng) {
    let (server, client) = if v6 {
        (
            IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 0x53]),
            IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 1]),
        )
    } else {
        (
            IpAddr::from([10, 250, 0, 53]),
            IpAddr::from([10, 250, 0, 1]),
        )
    };
    let ip = |server: IpAddr, client: IpAddr| match (server, client) {
        (IpAddr::V4(s), IpAddr::V4(c)) => PacketBuilder::ipv4(s.octets(), c.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(c)) => PacketBuilder::ipv6(s.octets(), c.octets(), 64),
        _ => unreachable!("same family"),
    };
    let mut snoop = DnsSnooper::new(vec![server], 8, max_message);

    // UDP: the payload is the message, as is.
    let mut packet = Vec::new();
    ip(server, client)
        .udp(53, 40000)
        .write(&mut packet, message)
        .expect("udp");
    let udp = snoop.snoop(&packet);
    assert_eq!(udp.release, Release::Accept);
    if message.is_empty() {
        assert!(udp.messages.is_empty());
    } else {
        assert_eq!(udp.messages, vec![message.to_vec()]);
    }
    // Not from a trusted server: nothing learned.
    let mut packet = Vec::new();
    ip(client, server)
        .udp(53, 40000)
        .write(&mut packet, message)
        .expect("udp");
    assert_eq!(snoop.snoop(&packet).events, vec![SnoopEvent::Untrusted]);

    // TCP: SYN-ACK, then the stream in segments.
    let tcp = |seq: u32, payload: &[u8], syn: bool, fin: bool| {
        let mut packet = Vec::new();
        let mut builder = ip(server, client).tcp(53, 40000, seq, 65535).ack(1);
        if syn {
            builder = builder.syn();
        }
        if fin {
            builder = builder.fin();
        }
        builder.write(&mut packet, payload).expect("tcp");
        packet
    };
    let isn: u32 = 0x7fff_ff00 ^ rng.next();
    assert!(snoop.snoop(&tcp(isn, &[], true, false)).messages.is_empty());
    let mut messages = Vec::new();
    let mut oversized = 0;
    let segs = segments(stream.len(), rng);
    for (i, &(start, end)) in segs.iter().enumerate() {
        let seq = |at: usize| isn.wrapping_add(1).wrapping_add(at as u32);
        if let Some(&(next_start, next_end)) = segs.get(i + 1) {
            if rng.one_in(7) {
                let early = snoop.snoop(&tcp(
                    seq(next_start),
                    &stream[next_start..next_end],
                    false,
                    false,
                ));
                assert_eq!(early.release, Release::Drop, "segment after a gap released");
                assert_eq!(early.events, vec![SnoopEvent::TcpGap]);
            }
        }
        let out = snoop.snoop(&tcp(seq(start), &stream[start..end], false, false));
        assert_eq!(out.release, Release::Accept);
        oversized += out
            .events
            .iter()
            .filter(|e| **e == SnoopEvent::Oversized)
            .count();
        assert!(
            out.events.iter().all(|e| *e == SnoopEvent::Oversized),
            "{:?}",
            out.events
        );
        messages.extend(out.messages);
    }
    let fin = snoop.snoop(&tcp(
        isn.wrapping_add(1).wrapping_add(stream.len() as u32),
        &[],
        false,
        true,
    ));
    assert!(fin.messages.is_empty());
    assert_eq!(snoop.tcp_flows(), 0, "connection kept after FIN");

    let expected = one_shot(stream, max_message);
    let expected_messages: Vec<Vec<u8>> = expected
        .iter()
        .filter_map(|f| match f {
            Framed::Message(m) => Some(m.clone()),
            Framed::Oversized { .. } => None,
        })
        .collect();
    assert_eq!(
        messages, expected_messages,
        "snooped messages differ from the stream's"
    );
    assert_eq!(oversized, expected.len() - expected_messages.len());
}

/// xorshift32 seeded by the control bytes.
struct Rng(u32);

impl Rng {
    fn new(control: &[u8]) -> Rng {
        let seed = control
            .iter()
            .fold(0x9e37_79b9u32, |h, b| h.rotate_left(5) ^ u32::from(*b));
        Rng(seed | 1)
    }

    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    fn one_in(&mut self, n: u32) -> bool {
        self.next().is_multiple_of(n)
    }
}
