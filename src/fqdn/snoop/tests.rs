use std::net::Ipv4Addr;

use etherparse::PacketBuilder;
use proptest::prelude::*;

use super::*;

const SERVER: [u8; 4] = [10, 0, 0, 53];
const CLIENT: [u8; 4] = [10, 0, 0, 7];

fn udp_reply(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .udp(53, 40000)
        .write(&mut out, payload)
        .unwrap();
    out
}

fn tcp_segment(seq: u32, syn: bool, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut builder = PacketBuilder::ipv4(SERVER, CLIENT, 64).tcp(53, 40000, seq, 64000);
    if syn {
        builder = builder.syn();
    }
    if fin {
        builder = builder.fin();
    }
    let mut out = Vec::new();
    builder.ack(1).write(&mut out, payload).unwrap();
    out
}

fn framed(messages: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        out.extend((m.len() as u16).to_be_bytes());
        out.extend(*m);
    }
    out
}

fn reply_flow(transport: Transport) -> DnsFlow {
    DnsFlow {
        transport,
        client: SocketAddr::from((CLIENT, 40000)),
        server: SocketAddr::from((SERVER, 53)),
        direction: Direction::Reply,
    }
}

fn snooper() -> DnsSnooper {
    DnsSnooper::new(Vec::new(), 4, 64)
}

#[test]
fn udp_payload_is_one_message() {
    let mut s = snooper();
    let out = s.snoop(&udp_reply(b"hello"));
    assert_eq!(out, Snooped::accept(reply_flow(Transport::Udp), vec![b"hello".to_vec()]));
    assert_eq!(s.snoop(&udp_reply(b"")).events, vec![SnoopEvent::Malformed]);
    assert_eq!(s.snoop(&[0x45, 0]).events, vec![SnoopEvent::Malformed]);
}

#[test]
fn untrusted_servers_are_not_learned_from() {
    let mut s = DnsSnooper::new(vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))], 4, 64);
    let out = s.snoop(&udp_reply(b"x"));
    assert_eq!(out.release, Release::Accept);
    assert!(out.messages.is_empty());
    assert_eq!(out.events, vec![SnoopEvent::Untrusted]);
    let mut s = DnsSnooper::new(vec![IpAddr::V4(Ipv4Addr::from(SERVER))], 4, 64);
    assert_eq!(s.snoop(&udp_reply(b"x")).messages.len(), 1);
}

#[test]
fn tcp_stream_is_framed_from_the_syn_ack() {
    let mut s = snooper();
    assert_eq!(
        s.snoop(&tcp_segment(999, true, false, &[])),
        Snooped::accept(reply_flow(Transport::Tcp), vec![])
    );
    let stream = framed(&[b"first", b"second"]);
    // Two messages, the second split across segments.
    let out = s.snoop(&tcp_segment(1000, false, false, &stream[..10]));
    assert_eq!(out.messages, vec![b"first".to_vec()]);
    let out = s.snoop(&tcp_segment(1010, false, true, &stream[10..]));
    assert_eq!(out.messages, vec![b"second".to_vec()]);
    assert_eq!(s.tcp_flows(), 0, "FIN forgets the connection");
}

#[test]
fn tcp_gap_is_dropped_and_retransmission_completes() {
    let mut s = snooper();
    s.snoop(&tcp_segment(0, true, false, &[]));
    let stream = framed(&[b"message"]);
    let out = s.snoop(&tcp_segment(5, false, false, &stream[4..]));
    assert_eq!(out.release, Release::Drop);
    assert_eq!(out.events, vec![SnoopEvent::TcpGap]);
    assert!(s
        .snoop(&tcp_segment(1, false, false, &stream[..4]))
        .messages
        .is_empty());
    let out = s.snoop(&tcp_segment(5, false, false, &stream[4..]));
    assert_eq!(out.messages, vec![b"message".to_vec()]);
}

#[test]
fn a_gap_that_never_fills_stops_following_instead_of_stalling() {
    let mut s = snooper();
    s.snoop(&tcp_segment(0, true, false, &[]));
    let late = tcp_segment(50, false, false, b"late");
    for _ in 1..MAX_CONSECUTIVE_GAPS {
        assert_eq!(s.snoop(&late).release, Release::Drop);
    }
    let out = s.snoop(&late);
    assert_eq!(
        (out.release, out.events),
        (Release::Accept, vec![SnoopEvent::TcpGap])
    );
    assert_eq!(s.tcp_flows(), 0);
    assert_eq!(s.snoop(&late).events, vec![SnoopEvent::TcpUntracked]);
}

#[test]
fn a_retransmitted_syn_ack_keeps_the_stream() {
    let mut s = snooper();
    s.snoop(&tcp_segment(0, true, false, &[]));
    let stream = framed(&[b"message"]);
    assert!(s
        .snoop(&tcp_segment(1, false, false, &stream[..4]))
        .messages
        .is_empty());
    s.snoop(&tcp_segment(0, true, false, &[]));
    let out = s.snoop(&tcp_segment(5, false, false, &stream[4..]));
    assert_eq!(out.messages, vec![b"message".to_vec()]);
    // A new ISN on the same ports is a new connection.
    s.snoop(&tcp_segment(1000, true, false, &[]));
    let out = s.snoop(&tcp_segment(1001, false, false, &framed(&[b"next"])));
    assert_eq!(out.messages, vec![b"next".to_vec()]);
}

#[test]
fn unseen_tcp_start_and_oversized_messages_are_counted() {
    let mut s = snooper();
    let out = s.snoop(&tcp_segment(1, false, false, &framed(&[b"x"])));
    assert_eq!(out.events, vec![SnoopEvent::TcpUntracked]);
    assert_eq!(out.release, Release::Accept);
    assert!(s
        .snoop(&tcp_segment(1, false, false, &[]))
        .events
        .is_empty());
    s.snoop(&tcp_segment(0, true, false, &[]));
    let big = vec![7u8; 100];
    let out = s.snoop(&tcp_segment(1, false, false, &framed(&[&big, b"ok"])));
    assert_eq!(out.events, vec![SnoopEvent::Oversized]);
    assert_eq!(out.messages, vec![b"ok".to_vec()]);
}

#[test]
fn tcp_flows_are_bounded() {
    let mut s = snooper();
    for port in 0..10u16 {
        let mut out = Vec::new();
        PacketBuilder::ipv4(SERVER, CLIENT, 64)
            .tcp(53, 40000 + port, 0, 1000)
            .syn()
            .ack(1)
            .write(&mut out, &[])
            .unwrap();
        s.snoop(&out);
    }
    assert_eq!(s.tcp_flows(), 4);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut s = snooper();
        let _ = s.snoop(&bytes);
        let _ = s.snoop(&udp_reply(&bytes));
        let _ = s.snoop(&tcp_segment(0, true, false, &[]));
        let _ = s.snoop(&tcp_segment(1, false, false, &bytes));
    }
}
