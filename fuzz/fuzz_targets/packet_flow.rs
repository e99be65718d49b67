//! Packet bytes → flow: `tollgate_core::packet::parse_flow` (and the DNS snooper's
//! packet slicing) on hostile and truncated IP packets.
//!
//! Every input is used twice:
//! - as a raw packet (the seed corpus holds real IPv4/IPv6 packets captured
//!   in a lab namespace): parsing must not panic, must be deterministic,
//!   must report the addresses the IP header carries, and a truncated copy
//!   that parses must give the flow of the whole packet (the queue copies
//!   only the first bytes, so more bytes may never change the verdict);
//! - as `arbitrary` input describing a well-formed packet (IPv4 or IPv6,
//!   any protocol number, any transport bytes) that is built with
//!   etherparse and truncated: the flow read back must be exactly the one
//!   built, whenever the copy holds the bytes the protocol needs.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::{Arbitrary, Unstructured};
use etherparse::{IpNumber, PacketBuilder};
use libfuzzer_sys::fuzz_target;
use tollgate_core::packet::flow::{Flow, Transport};
use tollgate_core::fqdn::DnsSnooper;
use tollgate_core::packet::packet_length;
use tollgate_core::packet::parse_flow;

#[derive(Arbitrary, Debug)]
struct Built {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    hop_limit: u8,
    protocol: u8,
    transport: Vec<u8>,
    cut: u16,
}

fuzz_target!(|data: &[u8]| {
    raw(data);
    if let Ok(built) = Built::arbitrary(&mut Unstructured::new(data)) {
        built_packet(&built);
    }
});

fn raw(packet: &[u8]) {
    let parsed = parse_flow(packet);
    assert_eq!(
        parsed,
        parse_flow(packet),
        "parse_flow is not deterministic"
    );
    let _ = packet_length(packet);
    if let Ok(flow) = &parsed {
        let (src, dst) =
            header_addresses(packet).expect("a flow from a packet without an IP header");
        assert_eq!(
            (flow.src, flow.dst),
            (src, dst),
            "flow addresses differ from the header"
        );
    }
    // Truncated copies: whatever a shorter copy decides, the whole packet
    // decides the same.
    for cut in cuts(packet.len()) {
        if let Ok(short) = parse_flow(&packet[..cut]) {
            assert_eq!(
                Ok(short),
                parsed,
                "a {cut}-byte copy parses to another flow than the {}-byte packet",
                packet.len()
            );
        }
    }
    let mut snooper = DnsSnooper::new(Vec::new(), 4, 512);
    let snooped = snooper.snoop(packet);
    assert!(snooped.messages.iter().all(|m| !m.is_empty()));
    assert!(snooper.tcp_flows() <= 4);
}

/// A handful of truncation points: every header boundary that matters,
/// plus one from the end.
fn cuts(len: usize) -> impl Iterator<Item = usize> {
    [
        0,
        1,
        19,
        20,
        21,
        23,
        24,
        39,
        40,
        41,
        43,
        44,
        47,
        48,
        60,
        64,
        len.saturating_sub(1),
    ]
    .into_iter()
    .filter(move |&c| c < len)
}

fn header_addresses(packet: &[u8]) -> Option<(IpAddr, IpAddr)> {
    match packet.first()? >> 4 {
        4 => {
            let src: [u8; 4] = packet.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
            Some((Ipv4Addr::from(src).into(), Ipv4Addr::from(dst).into()))
        }
        6 => {
            let src: [u8; 16] = packet.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = packet.get(24..40)?.try_into().ok()?;
            Some((Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into()))
        }
        _ => None,
    }
}

fn built_packet(built: &Built) {
    let protocol = built.protocol;
    // IPv6 extension header numbers would make etherparse read the
    // transport bytes as an extension header: not a transport.
    // IPv4 reads an authentication header (51) the same way.
    if (built.v6 && IpNumber(protocol).is_ipv6_ext_header_value())
        || (!built.v6 && IpNumber(protocol) == IpNumber::AUTHENTICATION_HEADER)
    {
        return;
    }
    let mut packet = Vec::new();
    let builder = if built.v6 {
        PacketBuilder::ipv6(built.src, built.dst, built.hop_limit)
    } else {
        let src: [u8; 4] = built.src[..4].try_into().expect("4 bytes");
        let dst: [u8; 4] = built.dst[..4].try_into().expect("4 bytes");
        PacketBuilder::ipv4(src, dst, built.hop_limit)
    };
    if builder
        .write(&mut packet, IpNumber(protocol), &built.transport)
        .is_err()
    {
        return;
    }
    let header = if built.v6 { 40 } else { 20 };
    let (src, dst) = header_addresses(&packet).expect("built packet has a header");
    let (expected, needs) = expected_transport(built.v6, protocol, &built.transport);
    let full = parse_flow(&packet);
    match expected {
        Some(transport) => assert_eq!(
            full,
            Ok(Flow {
                src,
                dst,
                transport,
                local: None,
            }),
            "built {built:?}"
        ),
        None => assert!(full.is_err(), "built {built:?} parsed as {full:?}"),
    }
    let cut = usize::from(built.cut) % (packet.len() + 1);
    let short = parse_flow(&packet[..cut]);
    if cut < header {
        assert!(
            short.is_err(),
            "{cut}-byte copy of {built:?} parsed as {short:?}"
        );
    } else if cut >= header + needs {
        assert_eq!(short, full, "{cut}-byte copy of {built:?}");
    } else {
        assert!(
            short.is_err() || short == full,
            "{cut}-byte copy of {built:?}"
        );
    }
}

/// What the flow's transport must be, and how many transport bytes that
/// takes; `None` when the transport bytes are too short.
fn expected_transport(v6: bool, protocol: u8, bytes: &[u8]) -> (Option<Transport>, usize) {
    let port = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
    match IpNumber(protocol) {
        IpNumber::TCP | IpNumber::UDP | IpNumber::SCTP => {
            if bytes.len() < 4 {
                return (None, 4);
            }
            let (src_port, dst_port) = (port(0), port(2));
            let transport = match IpNumber(protocol) {
                IpNumber::TCP => Transport::Tcp { src_port, dst_port },
                IpNumber::UDP => Transport::Udp { src_port, dst_port },
                _ => Transport::Sctp { src_port, dst_port },
            };
            (Some(transport), 4)
        }
        IpNumber::ICMP if !v6 => icmp(bytes),
        IpNumber::IPV6_ICMP if v6 => icmp(bytes),
        IpNumber::IGMP if !v6 => igmp(bytes),
        _ => (Some(Transport::Other { number: protocol }), 0),
    }
}

fn icmp(bytes: &[u8]) -> (Option<Transport>, usize) {
    match bytes {
        [icmp_type, icmp_code, ..] => (
            Some(Transport::Icmp {
                icmp_type: *icmp_type,
                icmp_code: *icmp_code,
            }),
            2,
        ),
        _ => (None, 2),
    }
}

/// RFC 3376: a v3 report (0x22) carries records from offset 8, the first
/// record's group at offset 12; other messages name the group at offset 4.
fn igmp(bytes: &[u8]) -> (Option<Transport>, usize) {
    let group = |at: usize| -> Option<Ipv4Addr> {
        let octets: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(Ipv4Addr::from(octets))
    };
    let Some(&igmp_type) = bytes.first() else {
        return (None, 1);
    };
    if igmp_type == 0x22 {
        let Some(records) = bytes.get(6..8) else {
            return (None, 8);
        };
        if records == [0, 0] {
            return (
                Some(Transport::Igmp {
                    igmp_type,
                    group: Ipv4Addr::UNSPECIFIED,
                }),
                8,
            );
        }
        (
            group(12).map(|group| Transport::Igmp { igmp_type, group }),
            16,
        )
    } else {
        (
            group(4).map(|group| Transport::Igmp { igmp_type, group }),
            8,
        )
    }
}
