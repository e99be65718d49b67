use super::*;
use etherparse::PacketBuilder;
use std::net::{IpAddr, Ipv6Addr};

fn v4(src: [u8; 4], dst: [u8; 4]) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
    PacketBuilder::ipv4(src, dst, 64)
}

/// Serializes a finished `PacketBuilder` chain with a payload.
macro_rules! build {
    ($builder:expr, $payload:expr $(,)?) => {{
        let mut out = Vec::new();
        $builder.write(&mut out, $payload).unwrap();
        out
    }};
}

/// An IPv4 header (no options) carrying `payload` with protocol `proto`.
fn raw_v4(proto: u8, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut out = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        proto,
        0,
        0,
        10,
        0,
        0,
        1,
        224,
        0,
        0,
        22,
    ];
    out.extend_from_slice(payload);
    out
}

#[test]
fn tcp_udp_over_ipv4_and_ipv6() {
    let syn = build!(
        v4([10, 0, 0, 1], [10, 0, 0, 2])
            .tcp(40000, 443, 1, 64240)
            .syn(),
        &[]
    );
    assert_eq!(
        parse_flow(&syn),
        Ok(Flow {
            src: IpAddr::from([10, 0, 0, 1]),
            dst: IpAddr::from([10, 0, 0, 2]),
            transport: Transport::Tcp {
                src_port: 40000,
                dst_port: 443
            },
            local: None,
        })
    );
    let src6: [u8; 16] = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
    let dst6: [u8; 16] = "fd00::2".parse::<Ipv6Addr>().unwrap().octets();
    let udp = build!(PacketBuilder::ipv6(src6, dst6, 64).udp(5353, 53), b"query");
    let flow = parse_flow(&udp).unwrap();
    assert_eq!(flow.dst, "fd00::2".parse::<IpAddr>().unwrap());
    assert_eq!(
        flow.transport,
        Transport::Udp {
            src_port: 5353,
            dst_port: 53
        }
    );
}

#[test]
fn icmp_and_icmpv6_type_and_code() {
    let echo = build!(
        v4([10, 0, 0, 1], [10, 0, 0, 2]).icmpv4_echo_request(1, 1),
        b"ping"
    );
    assert_eq!(
        parse_flow(&echo).unwrap().transport,
        Transport::Icmp {
            icmp_type: 8,
            icmp_code: 0
        }
    );
    let src6 = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let echo6 = build!(
        PacketBuilder::ipv6(src6, src6, 64).icmpv6_echo_request(1, 1),
        b"ping"
    );
    assert_eq!(
        parse_flow(&echo6).unwrap().transport,
        Transport::Icmp {
            icmp_type: 128,
            icmp_code: 0
        }
    );
}

#[test]
fn sctp_igmp_and_other_protocols() {
    let sctp = raw_v4(132, &[0x0b, 0x59, 0x00, 0x50, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        parse_flow(&sctp).unwrap().transport,
        Transport::Sctp {
            src_port: 2905,
            dst_port: 80
        }
    );
    let v2_report = raw_v4(2, &[0x16, 0, 0, 0, 239, 1, 2, 3]);
    assert_eq!(
        parse_flow(&v2_report).unwrap().transport,
        Transport::Igmp {
            igmp_type: 0x16,
            group: Ipv4Addr::new(239, 1, 2, 3)
        }
    );
    let v3_report = raw_v4(2, &[0x22, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 239, 9, 9, 9]);
    assert_eq!(
        parse_flow(&v3_report).unwrap().transport,
        Transport::Igmp {
            igmp_type: 0x22,
            group: Ipv4Addr::new(239, 9, 9, 9)
        }
    );
    let v3_empty = raw_v4(2, &[0x22, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        parse_flow(&v3_empty).unwrap().transport,
        Transport::Igmp {
            igmp_type: 0x22,
            group: Ipv4Addr::UNSPECIFIED
        }
    );
    let gre = raw_v4(47, &[0, 0, 0x08, 0]);
    assert_eq!(
        parse_flow(&gre).unwrap().transport,
        Transport::Other { number: 47 }
    );
}

#[test]
fn truncated_copies_keep_the_headers_they_have() {
    let syn = build!(
        v4([10, 0, 0, 1], [10, 0, 0, 2]).tcp(1, 2, 1, 1),
        &[0u8; 1400]
    );
    // The queue copies 128 bytes: the IP total length says more.
    assert!(parse_flow(&syn[..128]).is_ok());
    assert_eq!(
        parse_flow(&syn[..22]),
        Err(PacketError::Transport { protocol: "TCP" })
    );
    assert_eq!(parse_flow(&syn[..19]), Err(PacketError::IpHeader));
    assert_eq!(parse_flow(&[]), Err(PacketError::IpHeader));
}

#[test]
fn non_first_fragments_are_errors() {
    let mut frag = raw_v4(17, &[0u8; 16]);
    frag[6] = 0x00;
    frag[7] = 0x10; // fragment offset 16 * 8 bytes
    assert_eq!(parse_flow(&frag), Err(PacketError::Fragment));
}

#[test]
fn every_prefix_and_arbitrary_bytes_never_panic() {
    let samples = [
        build!(v4([10, 0, 0, 1], [10, 0, 0, 2]).tcp(1, 2, 1, 1), b"x"),
        raw_v4(2, &[0x22, 0, 0, 0, 0, 0, 0, 1, 4, 0, 0, 0, 239, 9, 9, 9]),
        build!(
            PacketBuilder::ipv6([1; 16], [2; 16], 64).udp(1, 2),
            b"payload",
        ),
    ];
    for sample in &samples {
        for len in 0..=sample.len() {
            let _ = parse_flow(&sample[..len]);
        }
    }
    // Deterministic pseudo-random bytes, with the version nibble forced
    // half of the time so the parsers get past the first byte.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..20_000 {
        let mut bytes = [0u8; 80];
        for b in bytes.iter_mut() {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            *b = (seed >> 56) as u8;
        }
        if i % 2 == 0 {
            bytes[0] = (bytes[0] & 0x0f) | if i % 4 == 0 { 0x40 } else { 0x60 };
        }
        let len = (seed % 81) as usize;
        let _ = parse_flow(&bytes[..len]);
    }
}

#[test]
fn packet_length_comes_from_the_ip_header_not_the_copy() {
    let mut v4 = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(1, 2, 1, 1)
        .write(&mut v4, &[0u8; 300])
        .unwrap();
    assert_eq!(super::packet_length(&v4[..128]), 340);
    let mut v6 = Vec::new();
    PacketBuilder::ipv6([1; 16], [2; 16], 64)
        .udp(1, 2)
        .write(&mut v6, &[0u8; 100])
        .unwrap();
    assert_eq!(super::packet_length(&v6[..60]), 148);
    assert_eq!(super::packet_length(&[0x45, 0]), 2);
    assert_eq!(super::packet_length(&[]), 0);
}
