//! TCP urgent-data normalisation on the L7 queue: `tollgate_core::packet`
//! `Rewrite::ClearUrgent` on hostile packets, and the L7 `Gate`'s verdicts
//! for segments carrying urgent data in both modes (`reset`, `strip`).
//!
//! Every input is used twice:
//! - as a raw packet (seeds: IPv4/IPv6 client segments with and without
//!   URG, built by `fuzz/sample-seeds.sh`);
//! - as `arbitrary` input describing a client segment (IPv4 or IPv6, flags,
//!   urgent pointer, payload) built with etherparse, so its checksum is
//!   right, and fed to a gate after the server's SYN-ACK.
//!
//! Invariants:
//! - the rewrite accepts exactly what `parse_segment` reads, and leaves a
//!   refused packet unchanged;
//! - after it the segment carries no urgent data, and everything else
//!   `parse_segment` reads (addresses, ports, numbers, flags, payload) is
//!   unchanged; only the TCP flags, checksum and urgent pointer bytes
//!   change; it is idempotent;
//! - a right checksum stays right, a wrong one stays wrong;
//! - the gate never accepts a segment with urgent data unchanged: under
//!   `reset` it is denied (RST to both ends), under `strip` it is accepted
//!   only rewritten; a segment without urgent data is never rewritten.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use etherparse::{IpSlice, PacketBuilder, TcpSlice};
use libfuzzer_sys::fuzz_target;
use tollgate_core::fqdn::{FqdnLookup, NoFqdn};
use tollgate_core::http::{FramingPolicy, DEFAULT_MAX_HEAD};
use tollgate_core::l7::{Admission, DenyResponse, Gate, Inspector, L7Policy, UrgentData};
use tollgate_core::marks::MarkLayout;
use tollgate_core::packet::{parse_segment, Action, Flow, Queued, Rewrite, Segment};

#[derive(Arbitrary, Debug)]
struct Built {
    v6: bool,
    client: [u8; 16],
    server: [u8; 16],
    ports: (u16, u16),
    seq: u32,
    urg: Option<u16>,
    fin: bool,
    rst: bool,
    psh: bool,
    payload: Vec<u8>,
    strip: bool,
}

fuzz_target!(|data: &[u8]| {
    raw(data);
    if let Ok(built) = Built::arbitrary(&mut Unstructured::new(data)) {
        built_segment(&built);
    }
});

/// The fields of a segment the rewrite must keep.
fn kept(segment: &Segment<'_>) -> impl PartialEq + std::fmt::Debug {
    (
        segment.key,
        segment.seq,
        segment.ack,
        segment.syn_ack,
        segment.fin,
        segment.rst,
        segment.payload.to_vec(),
    )
}

fn raw(packet: &[u8]) {
    let parsed = parse_segment(packet);
    let mut copy = packet.to_vec();
    let result = Rewrite::ClearUrgent.apply(&mut copy);
    assert_eq!(
        result.is_ok(),
        parsed.is_ok(),
        "rewrite and parse disagree: {result:?} {parsed:?}"
    );
    let Ok(before) = parsed else {
        assert_eq!(copy, packet, "a refused packet was changed");
        return;
    };
    let after = parse_segment(&copy).expect("the rewritten packet no longer parses");
    assert!(!after.urgent, "urgent data left after the rewrite");
    assert_eq!(kept(&after), kept(&before));
    let tcp_at = tcp_offset(packet);
    for (i, (a, b)) in packet.iter().zip(&copy).enumerate() {
        if a != b {
            assert!(
                [13, 16, 17, 18, 19].contains(&(i.wrapping_sub(tcp_at))),
                "byte {i} changed (TCP header at {tcp_at})"
            );
        }
    }
    assert_eq!(checksum_right(&copy), checksum_right(packet));
    let mut again = copy.clone();
    Rewrite::ClearUrgent.apply(&mut again).unwrap();
    assert_eq!(again, copy, "the rewrite is not idempotent");
}

/// Where the TCP header starts in a packet `parse_segment` reads.
fn tcp_offset(packet: &[u8]) -> usize {
    let ip = IpSlice::from_slice(packet).unwrap();
    ip.payload().payload.as_ptr() as usize - packet.as_ptr() as usize
}

fn checksum_right(packet: &[u8]) -> Option<bool> {
    let ip = IpSlice::from_slice(packet).ok()?;
    let tcp = TcpSlice::from_slice(ip.payload().payload).ok()?;
    let want = match &ip {
        IpSlice::Ipv4(v4) => {
            tcp.calc_checksum_ipv4(v4.header().source(), v4.header().destination())
        }
        IpSlice::Ipv6(v6) => {
            tcp.calc_checksum_ipv6(v6.header().source(), v6.header().destination())
        }
    };
    Some(same_sum(want.ok()?, tcp.checksum()))
}

/// Whether two checksums verify alike: equal, or 0 and 0xffff (+0 and -0
/// in one's complement, both accepted by a receiver).
fn same_sum(a: u16, b: u16) -> bool {
    a == b || (a ^ b == 0xffff && (a == 0 || b == 0))
}

/// Every connection is allowed with no L7 rule deciding it: the
/// normaliser runs ahead of any rule.
struct AllowAll;

impl L7Policy for AllowAll {
    fn admission(&self, _: &Flow, _: &dyn FqdnLookup) -> Admission {
        Admission::Allow
    }
}

fn built_segment(b: &Built) {
    let (client, server): (IpAddr, IpAddr) = if b.v6 {
        (
            Ipv6Addr::from(b.client).into(),
            Ipv6Addr::from(b.server).into(),
        )
    } else {
        let four = |a: [u8; 16]| Ipv4Addr::new(a[0], a[1], a[2], a[3]).into();
        (four(b.client), four(b.server))
    };
    let builder = |src: IpAddr, dst: IpAddr| match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family"),
    };
    let mut syn_ack = Vec::new();
    builder(server, client)
        .tcp(b.ports.1, b.ports.0, 5000, 64_240)
        .syn()
        .ack(b.seq)
        .write(&mut syn_ack, &[])
        .unwrap();
    let mut tcp = builder(client, server)
        .tcp(b.ports.0, b.ports.1, b.seq, 64_240)
        .ack(5001);
    if let Some(pointer) = b.urg {
        tcp = tcp.urg(pointer);
    }
    if b.fin {
        tcp = tcp.fin();
    }
    if b.rst {
        tcp = tcp.rst();
    }
    if b.psh {
        tcp = tcp.psh();
    }
    let payload = &b.payload[..b.payload.len().min(1400)];
    let mut packet = Vec::new();
    tcp.write(&mut packet, payload).unwrap();
    raw(&packet);
    let urgent = parse_segment(&packet).unwrap().urgent;
    assert_eq!(urgent, b.urg.is_some());
    if urgent {
        let mut copy = packet.clone();
        Rewrite::ClearUrgent.apply(&mut copy).unwrap();
        assert_eq!(checksum_right(&copy), Some(true));
    }

    let mode = if b.strip {
        UrgentData::Strip
    } else {
        UrgentData::Reset
    };
    let inspector = Inspector::new(
        NonZeroUsize::new(4).unwrap(),
        Duration::from_secs(60),
        DEFAULT_MAX_HEAD,
        DenyResponse::Forbidden,
    )
    .normalising(mode, FramingPolicy::Strict);
    let mut gate = Gate::new(inspector, 16, MarkLayout::default());
    let now = Instant::now();
    let queued = |id, payload| Queued {
        id,
        payload,
        mark: 0,
        indev: 0,
        local: None,
    };
    gate.segment(&queued(1, &syn_ack), (&AllowAll, &NoFqdn), now);
    let step = gate.segment(&queued(2, &packet), (&AllowAll, &NoFqdn), now);
    let own: Vec<Action> = step
        .verdicts
        .iter()
        .filter(|(id, _)| *id == 2)
        .map(|(_, action)| *action)
        .collect();
    for action in &own {
        match (urgent, mode, action) {
            (true, _, Action::Accept) => panic!("urgent data accepted unchanged"),
            (true, UrgentData::Reset, Action::AcceptRewritten(_)) => {
                panic!("urgent data stripped under reset")
            }
            (false, _, Action::AcceptRewritten(_)) => panic!("a plain segment rewritten"),
            _ => {}
        }
    }
    if urgent && mode == UrgentData::Reset {
        assert!(step.tally.urgent_reset, "{step:?}");
        assert_eq!(step.injections.len(), 2, "RST to both ends");
    }
}
