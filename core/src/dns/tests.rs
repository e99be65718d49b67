use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, MX, TXT};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use proptest::prelude::*;

use super::*;

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("test names are valid")
}

fn response(question: &str, answers: Vec<Record>) -> Message {
    let mut message = Message::new(0x1234, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(name(question), RecordType::A));
    message.add_answers(answers);
    message
}

fn a(owner: &str, ttl: u32, addr: [u8; 4]) -> Record {
    Record::from_rdata(name(owner), ttl, RData::A(A(Ipv4Addr::from(addr))))
}

fn aaaa(owner: &str, ttl: u32, addr: Ipv6Addr) -> Record {
    Record::from_rdata(name(owner), ttl, RData::AAAA(AAAA(addr)))
}

fn cname(owner: &str, ttl: u32, target: &str) -> Record {
    Record::from_rdata(name(owner), ttl, RData::CNAME(CNAME(name(target))))
}

fn wire(message: &Message) -> Vec<u8> {
    message.to_vec().expect("test messages encode")
}

fn v4(addr: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(addr))
}

#[test]
fn plain_a_and_aaaa_answers() {
    let six: Ipv6Addr = "2001:db8::7".parse().unwrap();
    let msg = response(
        "WWW.Example.COM.",
        vec![
            a("www.example.com.", 300, [192, 0, 2, 1]),
            aaaa("www.example.com.", 60, six),
        ],
    );
    let reply = parse_reply(&wire(&msg)).unwrap();
    assert_eq!(reply.questions(), ["www.example.com"]);
    let resolved = reply.resolved();
    assert_eq!(
        resolved,
        vec![
            Resolution {
                names: vec!["www.example.com".into()],
                address: v4([192, 0, 2, 1]),
                ttl: 300
            },
            Resolution {
                names: vec!["www.example.com".into()],
                address: IpAddr::V6(six),
                ttl: 60
            },
        ]
    );
}

#[test]
fn cname_chain_attributes_addresses_to_every_name() {
    let msg = response(
        "www.github.com.",
        vec![
            cname("www.github.com.", 3600, "github.com."),
            cname("github.com.", 60, "lb.github.net."),
            a("lb.github.net.", 30, [140, 82, 121, 4]),
            a("lb.github.net.", 30, [140, 82, 121, 3]),
        ],
    );
    let resolved = parse_reply(&wire(&msg)).unwrap().resolved();
    assert_eq!(resolved.len(), 2);
    for r in &resolved {
        assert_eq!(r.names, ["www.github.com", "github.com", "lb.github.net"]);
        assert_eq!(r.ttl, 30);
    }
    assert_eq!(resolved[0].address, v4([140, 82, 121, 4]));
}

#[test]
fn records_off_the_chain_are_ignored() {
    let msg = response(
        "api.example.com.",
        vec![
            a("api.example.com.", 60, [192, 0, 2, 10]),
            // A hostile server appends an unrelated name.
            a("bank.example.net.", 60, [203, 0, 113, 66]),
            cname("other.example.com.", 60, "api.example.com."),
        ],
    );
    let resolved = parse_reply(&wire(&msg)).unwrap().resolved();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].names, ["api.example.com"]);
    assert_eq!(resolved[0].address, v4([192, 0, 2, 10]));
}

#[test]
fn cname_loops_and_long_chains_are_bounded() {
    let msg = response(
        "a.loop.test.",
        vec![
            cname("a.loop.test.", 60, "b.loop.test."),
            cname("b.loop.test.", 60, "a.loop.test."),
            a("b.loop.test.", 60, [192, 0, 2, 2]),
        ],
    );
    let resolved = parse_reply(&wire(&msg)).unwrap().resolved();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].names, ["a.loop.test", "b.loop.test"]);

    let mut records = Vec::new();
    for i in 0..40 {
        records.push(cname(
            &format!("n{i}.chain.test."),
            60,
            &format!("n{}.chain.test.", i + 1),
        ));
    }
    records.push(a("n40.chain.test.", 60, [192, 0, 2, 3]));
    records.push(a(
        &format!("n{MAX_CNAME_CHAIN}.chain.test."),
        60,
        [192, 0, 2, 4],
    ));
    let resolved = parse_reply(&wire(&response("n0.chain.test.", records)))
        .unwrap()
        .resolved();
    assert_eq!(resolved.len(), 1, "only the address within the bound");
    assert_eq!(resolved[0].address, v4([192, 0, 2, 4]));
    assert_eq!(resolved[0].names.len(), MAX_CNAME_CHAIN + 1);
}

#[test]
fn records_of_other_classes_are_ignored() {
    let mut chaos = a("c.test.", 60, [192, 0, 2, 8]);
    chaos.dns_class = DNSClass::CH;
    let msg = response("c.test.", vec![chaos, a("c.test.", 60, [192, 0, 2, 9])]);
    let resolved = parse_reply(&wire(&msg)).unwrap().resolved();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].address, v4([192, 0, 2, 9]));
}

#[test]
fn duplicate_addresses_keep_the_largest_ttl() {
    let msg = response(
        "dup.test.",
        vec![
            a("dup.test.", 10, [192, 0, 2, 9]),
            a("dup.test.", 90, [192, 0, 2, 9]),
        ],
    );
    let resolved = parse_reply(&wire(&msg)).unwrap().resolved();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].ttl, 90);
}

#[test]
fn other_record_types_are_skipped() {
    let msg = response(
        "mail.test.",
        vec![
            Record::from_rdata(
                name("mail.test."),
                60,
                RData::MX(MX::new(10, name("mx.mail.test."))),
            ),
            Record::from_rdata(
                name("mail.test."),
                60,
                RData::TXT(TXT::new(vec!["v=spf1".into()])),
            ),
        ],
    );
    assert!(parse_reply(&wire(&msg)).unwrap().resolved().is_empty());
}

#[test]
fn ttl_with_top_bit_reads_as_zero() {
    let msg = response("t.test.", vec![a("t.test.", 0x8000_0001, [192, 0, 2, 5])]);
    assert_eq!(parse_reply(&wire(&msg)).unwrap().resolved()[0].ttl, 0);
}

#[test]
fn nxdomain_is_accepted_other_rcodes_are_not() {
    let mut msg = response("gone.test.", vec![]);
    msg.metadata.response_code = ResponseCode::NXDomain;
    assert!(parse_reply(&wire(&msg)).unwrap().resolved().is_empty());
    msg.metadata.response_code = ResponseCode::ServFail;
    assert_eq!(
        parse_reply(&wire(&msg)),
        Err(DnsError::UnusableResponseCode { rcode: 2 })
    );
}

#[test]
fn negative_answers_carry_nxdomain_and_the_soa_negative_ttl() {
    use hickory_proto::rr::rdata::SOA;
    let soa = |ttl, minimum| {
        Record::from_rdata(
            name("test."),
            ttl,
            RData::SOA(SOA::new(
                name("ns.test."),
                name("admin.test."),
                1,
                3600,
                600,
                86_400,
                minimum,
            )),
        )
    };
    let mut msg = response("gone.test.", vec![]);
    msg.metadata.response_code = ResponseCode::NXDomain;
    let reply = parse_reply(&wire(&msg)).unwrap();
    assert!(reply.nxdomain());
    assert_eq!(reply.negative_ttl(), None);
    // RFC 2308 §5: the smaller of the SOA's TTL and its MINIMUM field.
    msg.add_authority(soa(900, 60));
    assert_eq!(parse_reply(&wire(&msg)).unwrap().negative_ttl(), Some(60));
    let mut nodata = response("a-only.test.", vec![]);
    nodata.add_authority(soa(30, 3600));
    nodata.add_authority(soa(5, 5));
    let reply = parse_reply(&wire(&nodata)).unwrap();
    assert!(!reply.nxdomain());
    assert_eq!(reply.negative_ttl(), Some(30));
    assert!(!parse_reply(&wire(&response("x.test.", vec![])))
        .unwrap()
        .nxdomain());
}

#[test]
fn queries_and_other_opcodes_are_refused() {
    let mut msg = response("q.test.", vec![a("q.test.", 60, [192, 0, 2, 1])]);
    msg.metadata.message_type = MessageType::Query;
    assert_eq!(parse_reply(&wire(&msg)), Err(DnsError::NotAResponse));
    msg.metadata.message_type = MessageType::Response;
    msg.metadata.op_code = OpCode::Status;
    assert_eq!(
        parse_reply(&wire(&msg)),
        Err(DnsError::UnsupportedOpcode { opcode: 2 })
    );
    let empty = Message::new(1, MessageType::Response, OpCode::Query);
    assert_eq!(parse_reply(&wire(&empty)), Err(DnsError::NoQuestion));
}

#[test]
fn a_query_and_its_response_name_the_same_query() {
    let mut query = Message::new(0x1234, MessageType::Query, OpCode::Query);
    query.add_query(Query::query(name("WwW.Example.TEST."), RecordType::AAAA));
    let asked = parse_query(&wire(&query)).unwrap();
    assert_eq!(
        asked,
        DnsQuery {
            id: 0x1234,
            questions: vec![Question {
                name: "www.example.test".into(),
                qtype: 28,
                qclass: 1,
            }],
        }
    );
    // The response echoes id and question (0x20 case folded).
    let mut reply = Message::new(0x1234, MessageType::Response, OpCode::Query);
    reply.add_query(Query::query(name("www.EXAMPLE.test."), RecordType::AAAA));
    assert_eq!(parse_reply(&wire(&reply)).unwrap().query(), &asked);
    // Responses, other opcodes and empty questions are not queries.
    assert_eq!(parse_query(&wire(&reply)), Err(DnsError::NotAQuery));
    query.metadata.op_code = OpCode::Notify;
    assert!(matches!(
        parse_query(&wire(&query)),
        Err(DnsError::UnsupportedOpcode { .. })
    ));
    let empty = Message::new(1, MessageType::Query, OpCode::Query);
    assert_eq!(parse_query(&wire(&empty)), Err(DnsError::NoQuestion));
    assert_eq!(parse_query(&[1, 2, 3]), Err(DnsError::Malformed));
}

/// A reply in the shape a recursive resolver sends (name compression, EDNS
/// OPT record), assembled byte by byte; see tests/data/dns/README.md.
#[test]
fn recorded_reply_with_compression() {
    let bytes = include_bytes!("../../tests/data/dns/www-github-cname.bin");
    let resolved = parse_reply(bytes).unwrap().resolved();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].names, ["www.github.com", "github.com"]);
    assert_eq!(resolved[0].address, v4([192, 0, 2, 44]));
    assert_eq!(resolved[0].ttl, 60);
}

fn recorded(file: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/dns/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Replies captured from dnsmasq 2.90 (see tests/data/dns/README.md).
#[test]
fn replies_recorded_from_dnsmasq() {
    let www = parse_reply(&recorded("dnsmasq-www-github-a.bin")).unwrap();
    assert_eq!(www.questions(), ["www.github.com"], "0x20 case folded");
    assert_eq!(
        www.resolved(),
        vec![Resolution {
            names: vec!["www.github.com".into(), "github.com".into()],
            address: v4([192, 0, 2, 44]),
            ttl: 60
        }]
    );
    let six = parse_reply(&recorded("dnsmasq-www-github-aaaa.bin"))
        .unwrap()
        .resolved();
    assert_eq!(six.len(), 1);
    assert_eq!(six[0].address, "2001:db8::44".parse::<IpAddr>().unwrap());
    let cdn = parse_reply(&recorded("dnsmasq-cdn-cname-two-a.bin"))
        .unwrap()
        .resolved();
    let addresses: Vec<IpAddr> = cdn.iter().map(|r| r.address).collect();
    assert_eq!(addresses, [v4([198, 51, 100, 7]), v4([198, 51, 100, 8])]);
    assert!(cdn
        .iter()
        .all(|r| r.names == ["api.example.test", "edge.cdn.test"]));
    let nx = parse_reply(&recorded("dnsmasq-nxdomain.bin")).unwrap();
    assert!(nx.resolved().is_empty());
}

#[test]
fn tcp_stream_recorded_from_dnsmasq_at_every_split() {
    let stream = recorded("dnsmasq-tcp-two-replies.bin");
    for cut in 0..=stream.len() {
        let mut r = TcpStreamReassembler::default();
        let mut framed = r.push(1, &stream[..cut]).unwrap();
        framed.extend(r.push(1 + cut as u32, &stream[cut..]).unwrap());
        let questions: Vec<String> = framed
            .iter()
            .map(|f| match f {
                Framed::Message(m) => parse_reply(m).unwrap().questions()[0].clone(),
                Framed::Oversized { .. } => panic!("cut {cut}: {f:?}"),
            })
            .collect();
        assert_eq!(
            questions,
            ["www.github.com", "api.example.test"],
            "cut {cut}"
        );
    }
}

#[test]
fn hostile_samples_fail_cleanly() {
    for (file, bytes) in [
        (
            "compression-loop.bin",
            &include_bytes!("../../tests/data/dns/compression-loop.bin")[..],
        ),
        (
            "truncated-answer.bin",
            &include_bytes!("../../tests/data/dns/truncated-answer.bin")[..],
        ),
        (
            "huge-counts.bin",
            &include_bytes!("../../tests/data/dns/huge-counts.bin")[..],
        ),
        (
            "pointer-forward.bin",
            &include_bytes!("../../tests/data/dns/pointer-forward.bin")[..],
        ),
    ] {
        assert_eq!(parse_reply(bytes), Err(DnsError::Malformed), "{file}");
    }
    assert_eq!(parse_reply(&[]), Err(DnsError::Malformed));
}

#[test]
fn tcp_frames_several_messages_in_one_segment() {
    let one = wire(&response("a.test.", vec![a("a.test.", 60, [192, 0, 2, 1])]));
    let two = wire(&response("b.test.", vec![a("b.test.", 60, [192, 0, 2, 2])]));
    let mut stream = Vec::new();
    for m in [&one, &two] {
        stream.extend_from_slice(&(m.len() as u16).to_be_bytes());
        stream.extend_from_slice(m);
    }
    let mut r = TcpStreamReassembler::default();
    let framed = r.push(1000, &stream).unwrap();
    assert_eq!(framed, vec![Framed::Message(one), Framed::Message(two)]);
    assert_eq!(r.buffered(), 0);
}

#[test]
fn tcp_reassembles_split_messages_and_skips_retransmissions() {
    let msg = wire(&response(
        "split.test.",
        vec![a("split.test.", 60, [192, 0, 2, 1])],
    ));
    let mut stream = (msg.len() as u16).to_be_bytes().to_vec();
    stream.extend_from_slice(&msg);
    let mut r = TcpStreamReassembler::default();
    let seq = u32::MAX - 3; // wraps inside the message
    assert!(r.push(seq, &stream[..1]).unwrap().is_empty());
    assert!(r
        .push(seq.wrapping_add(1), &stream[1..10])
        .unwrap()
        .is_empty());
    // Retransmission of the first ten bytes changes nothing.
    assert!(r.push(seq, &stream[..10]).unwrap().is_empty());
    assert_eq!(r.buffered(), 8);
    // Overlapping segment: only the new part counts.
    let framed = r.push(seq.wrapping_add(5), &stream[5..]).unwrap();
    assert_eq!(framed, vec![Framed::Message(msg)]);
}

#[test]
fn tcp_gap_is_refused_without_losing_state() {
    let msg = wire(&response(
        "gap.test.",
        vec![a("gap.test.", 60, [192, 0, 2, 1])],
    ));
    let mut stream = (msg.len() as u16).to_be_bytes().to_vec();
    stream.extend_from_slice(&msg);
    let mut r = TcpStreamReassembler::default();
    r.push(10, &stream[..6]).unwrap();
    assert_eq!(
        r.push(20, &stream[10..]),
        Err(FramingError::Gap {
            expected: 16,
            got: 20
        })
    );
    // The missing bytes arrive (retransmitted), then the rest again.
    assert!(r.push(16, &stream[6..10]).unwrap().is_empty());
    assert_eq!(
        r.push(20, &stream[10..]).unwrap(),
        vec![Framed::Message(msg)]
    );
}

#[test]
fn tcp_oversized_message_is_skipped_and_framing_continues() {
    let small = wire(&response(
        "ok.test.",
        vec![a("ok.test.", 60, [192, 0, 2, 1])],
    ));
    let mut stream = 300u16.to_be_bytes().to_vec();
    stream.extend_from_slice(&[0xAB; 300]);
    stream.extend_from_slice(&(small.len() as u16).to_be_bytes());
    stream.extend_from_slice(&small);
    let mut r = TcpStreamReassembler::new(256);
    let mut framed = r.push(0, &stream[..100]).unwrap();
    framed.extend(r.push(100, &stream[100..]).unwrap());
    assert_eq!(
        framed,
        vec![
            Framed::Oversized {
                announced: 300,
                max: 256
            },
            Framed::Message(small)
        ]
    );
}

#[test]
fn tcp_reset_restarts_framing() {
    let mut r = TcpStreamReassembler::default();
    r.push(0, &[0x00, 0x10, 1, 2, 3]).unwrap();
    assert_eq!(r.buffered(), 3);
    r.reset();
    assert_eq!(r.buffered(), 0);
    assert_eq!(
        r.push(500, &[0, 1, 7]).unwrap(),
        vec![Framed::Message(vec![7])]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_query_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse_query(&bytes);
    }

    #[test]
    fn parse_reply_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(reply) = parse_reply(&bytes) {
            for r in reply.resolved() {
                prop_assert!(!r.names.is_empty() && r.names.len() <= MAX_CNAME_CHAIN + 1);
            }
        }
    }

    /// Mutating a valid reply (bit flips, truncation) never panics.
    #[test]
    fn mutated_replies_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = wire(&response(
            "www.github.com.",
            vec![cname("www.github.com.", 60, "github.com."), a("github.com.", 60, [192, 0, 2, 1])],
        ));
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= value;
        }
        let len = cut.index(bytes.len() + 1);
        let _ = parse_reply(&bytes[..len]);
    }

    /// Any segmentation of a byte stream frames the same messages as
    /// feeding it whole, and never holds more than the bound.
    #[test]
    fn reassembler_is_split_invariant(
        stream in proptest::collection::vec(any::<u8>(), 0..2000),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
        max in 1usize..600,
    ) {
        let mut whole = TcpStreamReassembler::new(max);
        let expected = whole.push(7, &stream).unwrap();
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut split = TcpStreamReassembler::new(max);
        let mut got = Vec::new();
        for w in points.windows(2) {
            got.extend(split.push(7 + w[0] as u32, &stream[w[0]..w[1]]).unwrap());
            prop_assert!(split.buffered() <= max);
        }
        prop_assert_eq!(got, expected);
    }
}
