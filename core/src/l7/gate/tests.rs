//! Verdicts by packet id for real segments: withheld ids released or
//! dropped together, the global cap's eviction order, RST and sweep.

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;

use super::*;
use crate::compile::{compile_yaml, LocalNode};
use crate::fqdn::NoFqdn;
use crate::l7::DenyResponse as L7DenyResponse;
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
