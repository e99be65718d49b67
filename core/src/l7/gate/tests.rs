//! Verdicts by packet id for real segments: withheld ids released or
//! dropped together, the global cap's eviction order, RST and sweep.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;

use super::*;
use crate::compile::{compile_yaml, LocalNode};
use crate::fqdn::NoFqdn;
use crate::l7::DenyResponse as L7DenyResponse;
use crate::l7::STALL;
use crate::ruleset::Ruleset;

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

const CLIENT: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [10, 0, 0, 2];
/// The client's first byte.
const ISN: u32 = 1000;

fn ruleset() -> Ruleset {
    let node = LocalNode {
        name: "n".into(),
        labels: Default::default(),
        addresses: vec![SERVER.into()],
    };
    compile_yaml(POLICY, &node)
}

fn gate(max_deferred: usize) -> Gate {
    let inspector = Inspector::new(
        NonZeroUsize::new(16).unwrap(),
        Duration::from_secs(60),
        crate::http::DEFAULT_MAX_HEAD,
        L7DenyResponse::Forbidden,
    );
    Gate::new(inspector, max_deferred, MarkLayout::default())
}

fn syn_ack(port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .tcp(80, port, 5000, 64000)
        .syn()
        .ack(ISN)
        .write(&mut out, &[])
        .unwrap();
    out
}

fn data(port: u16, seq: u32, payload: &[u8], rst: bool) -> Vec<u8> {
    let mut builder = PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .tcp(port, 80, seq, 64000)
        .ack(5001);
    if rst {
        builder = builder.rst();
    }
    let mut out = Vec::new();
    builder.write(&mut out, payload).unwrap();
    out
}

/// Feeds packets to the gate: `(id, bytes)`, all at `now`.
struct Run {
    gate: Gate,
    policy: Ruleset,
    now: Instant,
}

impl Run {
    fn new(max_deferred: usize) -> Run {
        Run {
            gate: gate(max_deferred),
            policy: ruleset(),
            now: Instant::now(),
        }
    }

    fn send(&mut self, id: PacketId, bytes: &[u8]) -> GateStep {
        let packet = Queued {
            id,
            payload: bytes,
            mark: 0,
            local: Some(LocalSide::Source),
            indev: 0,
        };
        self.gate
            .segment(&packet, (&self.policy, &NoFqdn), self.now)
    }

    /// Opens a connection from `port` (its SYN-ACK gets id `port`).
    fn open(&mut self, port: u16) {
        let marks = MarkLayout::default();
        let step = self.send(PacketId::from(port), &syn_ack(port));
        let mark = marks.apply(0, marks.l7_active());
        assert_eq!(
            step.verdicts,
            [(PacketId::from(port), Action::Repeat { mark })]
        );
    }
}

const HEAD: &[u8] = b"GET /api/x HTTP/1.1\r\nHost: a\r\n\r\n";
const DENIED: &[u8] = b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";

#[test]
fn a_head_in_pieces_is_withheld_then_released_in_order() {
    let mut run = Run::new(8);
    run.open(40000);
    let first = run.send(1, &data(40000, ISN, &HEAD[..5], false));
    assert_eq!(first.verdicts, [], "withheld");
    assert!(first.tally.deferred);
    let second = run.send(2, &data(40000, ISN + 5, &HEAD[5..12], false));
    assert_eq!(second.verdicts, []);
    let last = run.send(3, &data(40000, ISN + 12, &HEAD[12..], false));
    assert_eq!(
        last.verdicts,
        [
            (1, Action::Accept),
            (2, Action::Accept),
            (3, Action::Accept)
        ]
    );
    assert_eq!(last.requests.len(), 1);
    assert!(last.requests[0].allowed);
    assert!(last.injections.is_empty());
    // The next request passes at once.
    let next = run.send(4, &data(40000, ISN + HEAD.len() as u32, HEAD, false));
    assert_eq!(next.verdicts, [(4, Action::Accept)]);
}

#[test]
fn a_denied_head_drops_every_withheld_piece_and_answers() {
    let mut run = Run::new(8);
    run.open(40000);
    run.send(1, &data(40000, ISN, &DENIED[..6], false));
    let denied = run.send(2, &data(40000, ISN + 6, &DENIED[6..], false));
    let marks = MarkLayout::default();
    let mark = marks.apply(0, marks.l7_denied());
    assert_eq!(
        denied.verdicts,
        [(1, Action::Drop), (2, Action::Repeat { mark })]
    );
    assert_eq!(
        denied.injections.len(),
        2,
        "403 to the client, RST to the server"
    );
    assert!(!denied.tally.reset, "a 403, not a reset");
    assert!(!denied.requests[0].allowed);
    assert_eq!(
        denied.flow,
        Some(FlowKey {
            client: (CLIENT, 40000).into(),
            server: (SERVER, 80).into(),
        })
    );
}

#[test]
fn past_the_cap_the_connection_deferring_longest_is_forgotten() {
    let mut run = Run::new(2);
    for port in [40001, 40002, 40003] {
        run.open(port);
    }
    run.send(1, &data(40001, ISN, b"GET /a", false));
    run.now += Duration::from_millis(1);
    run.send(2, &data(40002, ISN, b"GET /b", false));
    run.now += Duration::from_millis(1);
    let third = run.send(3, &data(40003, ISN, b"GET /c", false));
    assert_eq!(third.verdicts, [(1, Action::Drop)]);
    assert!(third.tally.deferred && third.tally.evicted);
    // The forgotten connection's next bytes reset it.
    let after = run.send(4, &data(40001, ISN + 6, b"x HTTP/1.1\r\n\r\n", false));
    assert!(after.tally.reset);
    assert_eq!(after.verdicts.len(), 1);
    // The others still complete their heads.
    let done = run.send(5, &data(40002, ISN + 6, b"pi/ HTTP/1.1\r\n\r\n", false));
    assert_eq!(done.verdicts[0], (2, Action::Drop), "GET /bpi/ is denied");
}

#[test]
fn rst_and_sweep_drop_what_is_withheld() {
    let mut run = Run::new(8);
    run.open(40000);
    run.open(40001);
    run.send(1, &data(40000, ISN, b"GET /a", false));
    run.send(2, &data(40001, ISN, b"GET /b", false));
    let reset = run.send(3, &data(40000, ISN + 6, &[], true));
    assert_eq!(reset.verdicts, [(3, Action::Accept), (1, Action::Drop)]);
    assert_eq!(run.gate.flows(), 1);
    assert_eq!(run.gate.sweep(run.now + Duration::from_secs(30)), []);
    assert_eq!(
        run.gate.sweep(run.now + Duration::from_secs(61)),
        [(2, Action::Drop)]
    );
    assert_eq!(run.gate.flows(), 0);
}

#[test]
fn unreadable_packets_are_dropped() {
    let mut run = Run::new(8);
    let step = run.send(9, &[0x45, 0, 0]);
    assert_eq!(step.verdicts, [(9, Action::Drop)]);
    assert!(step.tally.malformed);
}

fn urgent_data(port: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .tcp(port, 80, seq, 64000)
        .ack(5001)
        .urg(1)
        .write(&mut out, payload)
        .unwrap();
    out
}

#[test]
fn stripped_urgent_segments_are_accepted_rewritten_also_when_released() {
    let inspector = Inspector::new(
        NonZeroUsize::new(16).unwrap(),
        Duration::from_secs(60),
        crate::http::DEFAULT_MAX_HEAD,
        L7DenyResponse::Forbidden,
    )
    .normalising(crate::l7::UrgentData::Strip, Default::default());
    let mut run = Run::new(8);
    run.gate = Gate::new(inspector, 8, MarkLayout::default());
    run.open(40);
    let (first, rest) = HEAD.split_at(10);
    let held = run.send(1, &urgent_data(40, ISN, first));
    assert!(held.verdicts.is_empty());
    assert!(held.tally.deferred && held.tally.urgent_stripped);
    let released = run.send(2, &data(40, ISN + 10, rest, false));
    let rewrite = Action::AcceptRewritten(Rewrite::ClearUrgent);
    assert_eq!(released.verdicts, [(1, rewrite), (2, Action::Accept)]);
    assert!(!released.tally.urgent_stripped);
    let next = ISN + HEAD.len() as u32;
    let passed = run.send(3, &urgent_data(40, next, HEAD));
    assert_eq!(passed.verdicts, [(3, rewrite)]);
    // A withheld rewrite is forgotten with its segment.
    let dropped_first = run.send(4, &urgent_data(40, next + HEAD.len() as u32, first));
    assert!(dropped_first.verdicts.is_empty());
    let reset = run.send(5, &data(40, next + HEAD.len() as u32 + 10, b"", true));
    assert_eq!(reset.verdicts, [(5, Action::Accept), (4, Action::Drop)]);
    assert!(run.gate.rewrites.is_empty());
}

#[test]
fn urgent_data_resets_the_connection_by_default() {
    let mut run = Run::new(8);
    run.open(41);
    let step = run.send(1, &urgent_data(41, ISN, HEAD));
    assert!(step.tally.urgent_reset && step.tally.reset);
    assert_eq!(step.injections.len(), 2, "RST to both ends");
    let marks = MarkLayout::default();
    let mark = marks.apply(0, marks.l7_denied());
    assert_eq!(step.verdicts, [(1, Action::Repeat { mark })]);
}

/// `packet` with one bit of its last byte flipped: the checksum is wrong.
fn corrupt(mut packet: Vec<u8>) -> Vec<u8> {
    let last = packet.len() - 1;
    packet[last] ^= 1;
    packet
}

#[test]
fn segments_their_receiver_discards_are_dropped_unread() {
    let mut run = Run::new(8);
    // A SYN-ACK the client would discard creates no state.
    let answer = run.send(40, &corrupt(syn_ack(40)));
    assert_eq!(answer.verdicts, [(40, Action::Drop)]);
    assert_eq!(answer.tally.discarded, Some(Discard::Checksum));
    assert_eq!(run.gate.flows(), 0);
    run.open(40);
    // A withheld piece, then a copy of the allowed head with a wrong
    // checksum and a RST with one: dropped, nothing released or forgotten.
    assert!(run
        .send(1, &data(40, ISN, &HEAD[..5], false))
        .verdicts
        .is_empty());
    let corrupted = run.send(2, &corrupt(data(40, ISN, DENIED, false)));
    assert_eq!(corrupted.verdicts, [(2, Action::Drop)]);
    assert_eq!(corrupted.tally.discarded, Some(Discard::Checksum));
    assert!(corrupted.requests.is_empty() && corrupted.injections.is_empty());
    let reset = run.send(3, &corrupt(data(40, ISN + 5, b"", true)));
    assert_eq!(reset.verdicts, [(3, Action::Drop)]);
    // An acknowledgment below the SYN-ACK's sequence number + 1.
    let mut old_ack = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .tcp(40, 80, ISN + 5, 64000)
        .ack(5000)
        .write(&mut old_ack, &HEAD[5..])
        .unwrap();
    let stale = run.send(4, &old_ack);
    assert_eq!(stale.verdicts, [(4, Action::Drop)]);
    assert_eq!(stale.tally.discarded, Some(Discard::StaleAck));
    let rest = run.send(5, &data(40, ISN + 5, &HEAD[5..], false));
    assert_eq!(rest.verdicts, [(1, Action::Accept), (5, Action::Accept)]);
    assert!(rest.requests[0].allowed);
}

/// How a segment of the proptest below is sent.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// The server discards it for a reason tollgate cannot see (a pure
    /// ACK's newer timestamp, a full window).
    Hidden,
    Checksum,
    Md5,
    OldTimestamp,
    OldAck,
}

/// One client segment: `len` bytes of one of two streams of allowed and
/// denied heads with the same framing, from where the client's stream
/// has got to, or again from where an earlier segment started (`rewind`:
/// that segment's index, modulo those sent).
#[derive(Clone, Copy, Debug)]
struct Piece {
    rewind: Option<usize>,
    len: usize,
    denied: bool,
    fault: Fault,
    stall: bool,
}

fn pieces() -> impl proptest::strategy::Strategy<Value = Vec<Piece>> {
    use proptest::prelude::*;
    let fault = prop_oneof![
        4 => Just(Fault::None),
        2 => Just(Fault::Hidden),
        1 => Just(Fault::Checksum),
        1 => Just(Fault::Md5),
        1 => Just(Fault::OldTimestamp),
        1 => Just(Fault::OldAck),
    ];
    let rewind = proptest::option::weighted(0.4, any::<usize>());
    let piece = (
        rewind,
        1usize..40,
        any::<bool>(),
        fault,
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(rewind, len, denied, fault, stall)| Piece {
            rewind,
            len,
            denied,
            fault,
            stall,
        });
    proptest::collection::vec(piece, 1..14)
}

/// The client segment for `piece` from offset `start`, its timestamp `ts`
/// unless the fault says otherwise (the SYN's was 100).
fn piece_packet(piece: &Piece, start: usize, ts: u32) -> Vec<u8> {
    let stream = if piece.denied { DENIED } else { HEAD }.repeat(3);
    let start = start.min(stream.len() - 1);
    let end = (start + piece.len).min(stream.len());
    let payload = &stream[start..end];
    let seq = ISN + start as u32;
    let value = if matches!(piece.fault, Fault::OldTimestamp) {
        50
    } else {
        ts
    };
    let mut options = vec![1, 1, 8, 10];
    options.extend(value.to_be_bytes());
    options.extend(1u32.to_be_bytes());
    if matches!(piece.fault, Fault::Md5) {
        options.extend([19, 18]);
        options.extend([0xaa; 16]);
        options.extend([1, 1]);
    }
    let ack = if matches!(piece.fault, Fault::OldAck) {
        4000
    } else {
        5001
    };
    let mut out = Vec::new();
    PacketBuilder::ipv4(CLIENT, SERVER, 64)
        .tcp(40, 80, seq, 64000)
        .ack(ack)
        .options_raw(&options)
        .unwrap()
        .write(&mut out, payload)
        .unwrap();
    if matches!(piece.fault, Fault::Checksum) {
        out = corrupt(out);
    }
    out
}

proptest::proptest! {
    /// Whatever a client sends, and whichever of its segments the server
    /// discards: every copy tollgate lets through of a byte it judged is
    /// the judged byte (under a GET-only rule with strict framing every
    /// byte let through is head), no segment a receiver would discard for
    /// a reason the segment shows is let through, and the requests the
    /// server reads from what it keeps are, in order, ones tollgate
    /// allowed.
    #[test]
    fn the_server_reads_only_judged_bytes(pieces in pieces()) {
        let mut run = Run::new(64);
        let answer = {
            let mut out = Vec::new();
            PacketBuilder::ipv4(SERVER, CLIENT, 64)
                .tcp(80, 40, 5000, 64000)
                .syn()
                .ack(ISN)
                .options_raw(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 100])
                .unwrap()
                .write(&mut out, &[])
                .unwrap();
            out
        };
        run.send(1000, &answer);
        let (mut sent, mut starts, mut cursor) = (Vec::new(), Vec::new(), 0);
        let mut accepted = Vec::new();
        let mut allowed = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            if piece.stall {
                run.now += STALL;
            }
            let start = match piece.rewind {
                Some(j) if i > 0 => starts[j % i],
                _ => cursor,
            };
            starts.push(start);
            cursor = cursor.max(start + piece.len);
            let packet = piece_packet(piece, start, 100 + i as u32);
            let step = run.send(i as PacketId, &packet);
            sent.push(packet);
            for (id, action) in step.verdicts {
                if matches!(action, Action::Accept | Action::AcceptRewritten(_)) {
                    accepted.push(id as usize);
                }
            }
            allowed.extend(step.requests.iter().filter(|r| r.allowed).filter_map(|r| r.request.clone()));
        }
        // Every byte position let through has one version.
        let mut version = std::collections::HashMap::new();
        for &i in &accepted {
            let segment = parse_segment(&sent[i]).unwrap();
            proptest::prop_assert!(
                matches!(pieces[i].fault, Fault::None | Fault::Hidden),
                "let through: {:?}", pieces[i]
            );
            for (at, byte) in segment.payload.iter().enumerate() {
                let position = segment.seq.wrapping_add(at as u32);
                let first = *version.entry(position).or_insert(*byte);
                proptest::prop_assert_eq!(first, *byte, "two versions at {}", position);
            }
        }
        // The server keeps what arrives in order and is not discarded.
        let mut stream = Vec::new();
        for &i in &accepted {
            if !matches!(pieces[i].fault, Fault::None) {
                continue;
            }
            let segment = parse_segment(&sent[i]).unwrap();
            let next = ISN.wrapping_add(stream.len() as u32);
            let skip = next.wrapping_sub(segment.seq) as usize;
            if skip <= segment.payload.len() {
                stream.extend_from_slice(&segment.payload[skip..]);
            }
        }
        let mut server = crate::http::RequestTracker::new(crate::http::DEFAULT_MAX_HEAD);
        let read: Vec<_> = server
            .feed(&stream)
            .into_iter()
            .map(|event| match event {
                crate::http::HttpEvent::Request(request) => Ok(request),
                other => Err(other),
            })
            .collect();
        proptest::prop_assert!(read.len() <= allowed.len(), "{:?} {:?}", read, allowed);
        for (read, allowed) in read.iter().zip(&allowed) {
            proptest::prop_assert_eq!(read.as_ref().ok(), Some(allowed));
        }
    }
}
