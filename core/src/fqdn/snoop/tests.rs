use std::net::{Ipv4Addr, SocketAddr};

use crate::fqdn::{Direction, DnsFlow, Transport};

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
    assert_eq!(
        out,
        Snooped::accept(reply_flow(Transport::Udp), vec![b"hello".to_vec()])
    );
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
fn a_reply_is_read_only_on_the_path_to_its_server() {
    let mut s = snooper();
    let packet = udp_reply(b"x");
    let mut asked = Vec::new();
    let wrong = s.snoop_via(&packet, |server| {
        asked.push(server);
        ReplyPath {
            arrived: 3,
            route: Some(2),
        }
    });
    assert_eq!(asked, [IpAddr::from(SERVER)]);
    assert_eq!(
        (wrong.release, wrong.messages.len(), wrong.events),
        (Release::Accept, 0, vec![SnoopEvent::WrongInterface])
    );
    let no_route = ReplyPath {
        arrived: 3,
        route: None,
    };
    assert_eq!(
        s.snoop_via(&packet, |_| no_route).events,
        vec![SnoopEvent::WrongInterface]
    );
    let right = ReplyPath {
        arrived: 2,
        route: Some(2),
    };
    assert_eq!(s.snoop_via(&packet, |_| right).messages.len(), 1);
    // Made on the node (from lo) by a local server, or not.
    let local = ReplyPath {
        arrived: 1,
        route: Some(1),
    };
    assert_eq!(s.snoop_via(&packet, |_| local).messages.len(), 1);
    let made_for_a_remote_server = ReplyPath {
        arrived: 1,
        route: Some(2),
    };
    assert_eq!(
        s.snoop_via(&packet, |_| made_for_a_remote_server).events,
        vec![SnoopEvent::WrongInterface]
    );
    // A forged TCP segment on the wrong path never enters the stream.
    s.snoop(&tcp_segment(0, true, false, &[]));
    let forged = tcp_segment(1, false, false, &framed(&[b"forged"]));
    assert_eq!(
        s.snoop_via(&forged, |_| no_route).events,
        vec![SnoopEvent::WrongInterface]
    );
    let genuine = s.snoop(&tcp_segment(1, false, false, &framed(&[b"genuine"])));
    assert_eq!(genuine.messages, vec![b"genuine".to_vec()]);
}

#[test]
fn queries_are_read_from_the_client_without_a_path_check() {
    let mut s = snooper();
    let mut query = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .udp(40000, 53)
        .write(&mut query, b"q")
        .unwrap();
    let out = s.snoop_via(&query, |_| unreachable!("queries are not path-checked"));
    let flow = DnsFlow {
        direction: Direction::Query,
        ..reply_flow(Transport::Udp)
    };
    assert_eq!(out, Snooped::accept(flow, vec![b"q".to_vec()]));
    // A query to a server outside the trusted list is not remembered.
    let mut trusted = DnsSnooper::new(vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))], 4, 64);
    let out = trusted.snoop(&query);
    assert_eq!((out.messages.len(), out.events.len()), (0, 0));
    // The client's TCP stream is framed from its SYN.
    let segment = |seq: u32, syn: bool, payload: &[u8]| {
        let mut builder = PacketBuilder::ipv4(CLIENT, SERVER, 64).tcp(40000, 53, seq, 64000);
        if syn {
            builder = builder.syn();
        }
        let mut out = Vec::new();
        builder.write(&mut out, payload).unwrap();
        out
    };
    s.snoop(&segment(7, true, &[]));
    let out = s.snoop(&segment(8, false, &framed(&[b"tcp query"])));
    assert_eq!(out.messages, vec![b"tcp query".to_vec()]);
    assert_eq!(out.flow.map(|f| f.direction), Some(Direction::Query));
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
