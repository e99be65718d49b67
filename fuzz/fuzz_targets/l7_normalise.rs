//! Stream normalisation on the L7 queue (issue 27): `tollgate_core::packet`
//! `parse_segment`'s discard reasons and timestamps on hostile packets,
//! and the L7 `Gate` fed a client's segments that overlap, repeat and
//! rewrite each other, carry arbitrary TCP options and IPv6 Destination
//! options, stale timestamps and acknowledgments, wrong checksums and
//! urgent data, with stalls between them.
//!
//! Every input is used twice:
//! - as a raw packet (seeds: IPv4/IPv6 client segments with timestamps, MD5
//!   and TCP-AO options, malformed options, Destination options of every
//!   action, wrong checksums, data without ACK, from
//!   `fuzz/normalise-seeds.py`);
//! - as `arbitrary` input describing a connection: the server's SYN-ACK
//!   (with or without a timestamp), then client segments, each a piece of
//!   one of two streams of allowed and denied heads with the same framing,
//!   from where the stream has got to or from where an earlier segment
//!   started, under a `GET /api/*` rule with strict framing (so every byte
//!   let through is head).
//!
//! Invariants:
//! - the parse is deterministic, and a segment it does not call
//!   [`Discard::Checksum`] verifies by an independent checksum (and the
//!   other way round); clearing urgent data changes neither the discard
//!   reason nor the timestamp;
//! - the gate never lets through a segment `parse_segment` calls discarded;
//! - pinning: every copy of a byte position the gate lets through (at
//!   once or released) is the first version it let through there;
//! - the timestamps and acknowledgments of the segments the gate lets
//!   through (or withholds) never go back, from the SYN-ACK's on.
#![no_main]

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use etherparse::{IpSlice, PacketBuilder, TcpSlice};
use libfuzzer_sys::fuzz_target;
use tollgate_core::compile::{compile, LocalNode};
use tollgate_core::http::{FramingPolicy, DEFAULT_MAX_HEAD};
use tollgate_core::l7::{DenyResponse, Gate, Inspector, UrgentData, STALL};
use tollgate_core::marks::MarkLayout;
use tollgate_core::model::Snapshot;
use tollgate_core::packet::{parse_segment, Action, Discard, PacketId, Queued, Rewrite};
use tollgate_core::ruleset::Ruleset;
use tollgate_core::decode::parse_documents;

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: api-only}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {}}]
  ingress:
  - name: allow-api
    action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols:
    - http: {method: GET, path: /api/*}
";

const HEAD: &[u8] = b"GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n";
const DENIED: &[u8] = b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
/// The client's first byte, and the server's.
const ISN: u32 = 0xffff_ff00;
const SERVER_ISN: u32 = 5000;

fn ruleset() -> &'static Ruleset {
    static RULESET: OnceLock<Ruleset> = OnceLock::new();
    RULESET.get_or_init(|| {
        let (objects, problems) = parse_documents(Path::new("fuzz.yaml"), POLICY);
        assert!(problems.is_empty(), "{problems:?}");
        let local = LocalNode {
            name: "n".to_owned(),
            labels: Default::default(),
            addresses: vec![IpAddr::from([10, 0, 0, 2]), "fd00::2".parse().unwrap()],
        };
        compile(&Snapshot { objects }, &local)
    })
}

#[derive(Arbitrary, Debug)]
struct Connection {
    v6: bool,
    /// The SYN's timestamp, echoed by the SYN-ACK; `None`: no timestamps.
    syn_timestamp: Option<u32>,
    pieces: Vec<Piece>,
}

#[derive(Arbitrary, Debug)]
struct Piece {
    /// Again from where an earlier piece started (its index, modulo those
    /// sent), or from where the stream has got to.
    rewind: Option<u8>,
    len: u8,
    denied: bool,
    /// Added to the newest timestamp (wrapping: may go back).
    timestamp: Option<i16>,
    /// Added to the server's next byte as the acknowledgment.
    ack: i16,
    /// Raw TCP option bytes after the timestamp (padded to 4 bytes).
    options: Vec<u8>,
    /// A Destination Options header's option bytes (IPv6 only).
    destination: Option<Vec<u8>>,
    corrupt: bool,
    urgent: bool,
    stall: bool,
}

fuzz_target!(|data: &[u8]| {
    raw(data);
    if let Ok(connection) = Connection::arbitrary(&mut Unstructured::new(data)) {
        connection_through_gate(&connection);
    }
});

fn raw(packet: &[u8]) {
    let Ok(segment) = parse_segment(packet) else {
        return;
    };
    assert_eq!(parse_segment(packet), Ok(segment), "not deterministic");
    if let Some(right) = checksum_verifies(packet) {
        assert_eq!(
            segment.discard == Some(Discard::Checksum),
            !right,
            "checksum: {:?}",
            segment.discard
        );
    }
    let mut copy = packet.to_vec();
    Rewrite::ClearUrgent.apply(&mut copy).unwrap();
    let cleared = parse_segment(&copy).unwrap();
    assert_eq!(
        (cleared.discard, cleared.timestamp),
        (segment.discard, segment.timestamp)
    );
}

/// The TCP checksum by hand (RFC 793 pseudo-header, one's complement sum
/// over the segment, +0 and -0 alike): `Some(true)` when it verifies,
/// `None` when the packet has no whole TCP segment to sum.
fn checksum_verifies(packet: &[u8]) -> Option<bool> {
    let ip = IpSlice::from_slice(packet).ok()?;
    let tcp = TcpSlice::from_slice(ip.payload().payload).ok()?;
    let segment = tcp.slice();
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u64::from(word);
        }
    };
    match &ip {
        IpSlice::Ipv4(v4) => {
            add(&v4.header().source());
            add(&v4.header().destination());
        }
        IpSlice::Ipv6(v6) => {
            add(&v6.header().source());
            add(&v6.header().destination());
        }
    }
    add(&[0, 6]);
    add(&(segment.len() as u32).to_be_bytes());
    add(segment);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(sum == 0xffff || sum == 0)
}

fn connection_through_gate(c: &Connection) {
    let (client, server): (IpAddr, IpAddr) = if c.v6 {
        ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
    } else {
        ([10, 0, 0, 1].into(), [10, 0, 0, 2].into())
    };
    let builder = |src: IpAddr, dst: IpAddr| match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => unreachable!("one family"),
    };
    let timestamp_option = |value: u32, echo: u32| {
        let mut option = vec![1, 1, 8, 10];
        option.extend(value.to_be_bytes());
        option.extend(echo.to_be_bytes());
        option
    };
    let mut syn_ack = Vec::new();
    let answer = builder(server, client)
        .tcp(80, 40000, SERVER_ISN, 64_240)
        .syn()
        .ack(ISN)
        .options_raw(
            &c.syn_timestamp
                .map_or(Vec::new(), |ts| timestamp_option(7, ts)),
        )
        .unwrap();
    answer.write(&mut syn_ack, &[]).unwrap();

    let inspector = Inspector::new(
        NonZeroUsize::new(4).unwrap(),
        Duration::from_secs(60),
        DEFAULT_MAX_HEAD,
        DenyResponse::Forbidden,
    )
    .normalising(UrgentData::Strip, FramingPolicy::Strict);
    let mut gate = Gate::new(inspector, 64, MarkLayout::default());
    let mut now = Instant::now();
    gate.segment(
        &queued(PacketId::MAX, &syn_ack),
        (ruleset(), &tollgate_core::fqdn::NoFqdn),
        now,
    );

    let mut sent: Vec<Vec<u8>> = Vec::new();
    let (mut starts, mut cursor) = (Vec::new(), 0usize);
    let mut newest_ts = c.syn_timestamp.unwrap_or(0);
    // What was let through (or withheld) at inspection, in order.
    let mut let_through: Vec<(Option<u32>, u32)> = Vec::new();
    let mut version: HashMap<u32, u8> = HashMap::new();
    for (i, piece) in c.pieces.iter().take(24).enumerate() {
        if piece.stall {
            now += STALL;
        }
        let start = match piece.rewind {
            Some(j) if i > 0 => starts[usize::from(j) % i],
            _ => cursor,
        };
        let stream = if piece.denied { DENIED } else { HEAD }.repeat(3);
        let start = start.min(stream.len() - 1);
        let end = (start + usize::from(piece.len).max(1)).min(stream.len());
        starts.push(start);
        cursor = cursor.max(end);
        let mut options = Vec::new();
        if let Some(delta) = piece.timestamp {
            let value = newest_ts.wrapping_add_signed(i32::from(delta));
            newest_ts = newest_ts.max(value);
            options.extend(timestamp_option(value, 7));
        }
        options.extend(piece.options.iter().take(40 - options.len()));
        while options.len() % 4 != 0 {
            options.push(0);
        }
        let ack = (SERVER_ISN + 1).wrapping_add_signed(i32::from(piece.ack));
        let mut tcp = builder(client, server)
            .tcp(40000, 80, ISN.wrapping_add(start as u32), 64_240)
            .ack(ack)
            .psh();
        if piece.urgent {
            tcp = tcp.urg(1);
        }
        let Ok(tcp) = tcp.options_raw(&options) else {
            continue;
        };
        let mut packet = Vec::new();
        tcp.write(&mut packet, &stream[start..end]).unwrap();
        if let (true, Some(body)) = (c.v6, &piece.destination) {
            packet = with_destination_options(&packet, body);
        }
        if piece.corrupt {
            let last = packet.len() - 1;
            packet[last] ^= 0x20;
        }
        let id = i as PacketId;
        let segment = parse_segment(&packet).expect("a packet built here parses");
        let step = gate.segment(
            &queued(id, &packet),
            (ruleset(), &tollgate_core::fqdn::NoFqdn),
            now,
        );
        sent.push(packet.clone());
        let own_accepted = step
            .verdicts
            .iter()
            .any(|(v, a)| *v == id && matches!(a, Action::Accept | Action::AcceptRewritten(_)));
        if own_accepted || step.tally.deferred {
            let_through.push((segment.timestamp.map(|t| t.value), segment.ack));
        }
        for (released, action) in &step.verdicts {
            if !matches!(action, Action::Accept | Action::AcceptRewritten(_)) {
                continue;
            }
            let copy = parse_segment(&sent[*released as usize]).unwrap();
            assert_eq!(copy.discard, None, "let through: {copy:?}");
            for (at, byte) in copy.payload.iter().enumerate() {
                let position = copy.seq.wrapping_add(at as u32);
                let first = *version.entry(position).or_insert(*byte);
                assert_eq!(first, *byte, "two versions let through at {position}");
            }
        }
    }
    // Timestamps (when the SYN-ACK says they are used) and
    // acknowledgments never go back.
    let (mut ts, mut ack) = (c.syn_timestamp, SERVER_ISN + 1);
    for (value, acked) in let_through {
        if let (Some(newest), Some(value)) = (ts, value) {
            assert!(
                newest.wrapping_sub(value) as i32 <= 0,
                "PAWS: {value} after {newest}"
            );
            ts = Some(value);
        }
        assert!(
            ack.wrapping_sub(acked) as i32 <= 0,
            "ACK {acked} after {ack}"
        );
        ack = acked;
    }
}

fn queued(id: PacketId, payload: &[u8]) -> Queued<'_> {
    Queued {
        id,
        payload,
        mark: 0,
        indev: 0,
        local: None,
    }
}

/// `packet` (IPv6) with a Destination Options header holding `options`
/// (zero-padded to the header's 8-byte length) in front of TCP.
fn with_destination_options(packet: &[u8], options: &[u8]) -> Vec<u8> {
    let mut body = options[..options.len().min(246)].to_vec();
    while (body.len() + 2) % 8 != 0 {
        body.push(0);
    }
    let len = body.len() + 2;
    let mut out = packet[..40].to_vec();
    let next = std::mem::replace(&mut out[6], 60);
    let payload_len = u16::from_be_bytes([out[4], out[5]]) + len as u16;
    out[4..6].copy_from_slice(&payload_len.to_be_bytes());
    out.extend([next, (len / 8 - 1) as u8]);
    out.extend(body);
    out.extend(&packet[40..]);
    out
}
