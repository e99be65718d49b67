use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

use super::*;
use crate::compile::{compile_yaml, LocalNode};
use crate::fqdn::NoFqdn;
use crate::http::FramingPolicy;
use crate::l7::DenyResponse as L7DenyResponse;
use crate::packet::segment::{parse_segment, tcp_payload_len, FlowKey, Segment, SegmentError};
use crate::packet::segment::{Discard, Rewrite, Timestamp};
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
    - http: {method: GET, path: /api/v2/*}
    - http: {host: '*.bar.com'}
  - name: plain
    action: Allow
    ports: [{protocol: TCP, port: 81}]
  - name: closed
    action: Drop
    ports: [{protocol: TCP, port: 82}]
  - name: tls-bar
    action: Allow
    ports: [{protocol: TCP, port: 443}]
    l7Protocols:
    - tls: {sni: '*.bar.com'}
";

fn ruleset() -> Ruleset {
    let node = LocalNode {
        name: "n".into(),
        labels: Default::default(),
        addresses: vec!["10.0.0.2".parse().unwrap(), "fd00::2".parse().unwrap()],
    };
    compile_yaml(POLICY, &node)
}

fn inspector(max_flows: usize, response: L7DenyResponse) -> Inspector {
    Inspector::new(
        NonZeroUsize::new(max_flows).unwrap(),
        Duration::from_secs(60),
        crate::http::DEFAULT_MAX_HEAD,
        response,
    )
    // The stream-following tests below predate strict framing; the strict
    // shapes have their own tests (`strict_framing_*`).
    .normalising(UrgentData::Reset, FramingPolicy::Lenient)
}

fn key(client_port: u16, server_port: u16) -> FlowKey {
    FlowKey {
        client: SocketAddr::new("10.0.0.1".parse().unwrap(), client_port),
        server: SocketAddr::new("10.0.0.2".parse().unwrap(), server_port),
    }
}

/// What the segments below acknowledge: the server's first byte.
const SERVER_NEXT: u32 = 7000;

fn segment(key: FlowKey, seq: u32, payload: &[u8]) -> Segment<'_> {
    Segment {
        key,
        seq,
        ack: SERVER_NEXT,
        syn_ack: false,
        fin: false,
        rst: false,
        urgent: false,
        timestamp: None,
        discard: None,
        payload,
    }
}

/// The server's SYN-ACK of connection `key` (named from the client), the
/// client's first byte at `seq`; without timestamps.
fn syn_ack(key: FlowKey, seq: u32) -> Segment<'static> {
    Segment {
        key: key.reversed(),
        seq: SERVER_NEXT - 1,
        ack: seq,
        syn_ack: true,
        ..segment(key, 0, b"")
    }
}

/// The client's FIN (with `payload`, possibly empty).
fn fin(key: FlowKey, seq: u32, payload: &[u8]) -> Segment<'_> {
    Segment {
        fin: true,
        ..segment(key, seq, payload)
    }
}

/// The server's SYN-ACK (the client's next byte at `seq`), then the
/// first segment.
fn start(
    inspector: &mut Inspector,
    policy: &Ruleset,
    (key, seq): (FlowKey, u32),
    payload: &[u8],
    now: Instant,
) -> Inspection {
    inspector.handshake(&syn_ack(key, seq), None, (policy, &NoFqdn), now);
    inspector.inspect(&segment(key, seq, payload), now)
}

/// A connection from its SYN-ACK, then a stream in `piece`-byte segments;
/// returns the actions.
fn feed(
    inspector: &mut Inspector,
    policy: &Ruleset,
    (key, seq): (FlowKey, u32),
    bytes: &[u8],
    piece: usize,
    now: Instant,
) -> Vec<L7Action> {
    inspector.handshake(&syn_ack(key, seq), None, (policy, &NoFqdn), now);
    let mut seq = seq;
    let mut actions = Vec::new();
    for chunk in bytes.chunks(piece) {
        actions.push(inspector.inspect(&segment(key, seq, chunk), now).action);
        seq = seq.wrapping_add(chunk.len() as u32);
    }
    actions
}

fn denied_request(action: &L7Action) -> Option<(&str, &str, L7DenyResponse)> {
    match action {
        L7Action::Deny(Denial {
            reason: DenyReason::Request { request, rule },
            response,
            ..
        }) => Some((request.method.as_str(), rule.name.as_deref()?, *response)),
        _ => None,
    }
}

#[test]
fn keep_alive_allowed_then_denied_request() {
    let policy = ruleset();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let now = Instant::now();
    let k = key(40000, 80);
    let get = b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\n\r\n";
    let first = start(&mut inspector, &policy, (k, 1), get, now);
    assert_eq!(first.action, L7Action::Pass);
    assert_eq!(first.requests.len(), 1);
    assert!(first.requests[0].allowed);
    let second = b"POST /api/v2/x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n";
    let denied = inspector.inspect(&segment(k, 1 + get.len() as u32, second), now);
    assert_eq!(
        denied_request(&denied.action),
        Some(("POST", "allow-api", L7DenyResponse::Forbidden))
    );
    assert!(!denied.requests[0].allowed);
    assert!(
        inspector.is_empty(),
        "state of a denied connection is dropped"
    );
}

#[test]
fn host_glob_and_alternatives() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let mut first = |port, head: &str| {
        start(
            &mut inspector,
            &policy,
            (key(port, 80), 1),
            head.as_bytes(),
            now,
        )
        .action
    };
    assert_eq!(
        first(1, "DELETE /x HTTP/1.1\r\nHost: Foo.Bar.com:8080\r\n\r\n"),
        L7Action::Pass
    );
    let other = first(2, "DELETE /x HTTP/1.1\r\nHost: foo.baz.com\r\n\r\n");
    assert!(denied_request(&other).is_some(), "{other:?}");
    let admin = first(3, "GET /admin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(denied_request(&admin).is_some(), "{admin:?}");
    // Normalisation: a dot segment cannot walk out of the allowed prefix.
    let escape = first(4, "GET /api/v2/../../admin HTTP/1.1\r\n\r\n");
    assert!(denied_request(&escape).is_some(), "{escape:?}");
}

#[test]
fn head_split_across_segments_is_matched_once_complete() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let head = b"GET /admin HTTP/1.1\r\nHost: a\r\nUser-Agent: split\r\n\r\n";
    let actions = feed(&mut inspector, &policy, (key(5, 80), 100), head, 3, now);
    let last = actions.len() - 1;
    assert!(actions[..last].iter().all(|a| *a == L7Action::Defer));
    assert!(denied_request(&actions[last]).is_some());
    match &actions[last] {
        L7Action::Deny(denial) => assert_eq!(denial.unsent_from, Some(100)),
        other => panic!("{other:?}"),
    }
    let allowed = b"GET /api/v2/ok HTTP/1.1\r\nHost: a\r\n\r\n";
    let actions = feed(&mut inspector, &policy, (key(99, 80), 7), allowed, 10, now);
    assert_eq!(
        actions,
        [
            L7Action::Defer,
            L7Action::Defer,
            L7Action::Defer,
            L7Action::Release
        ]
    );
    // One head in too many pieces is reset rather than held in the queue.
    let actions = feed(&mut inspector, &policy, (key(6, 80), 1), head, 1, now);
    let at = actions
        .iter()
        .position(|a| matches!(a, L7Action::Deny(_)))
        .unwrap();
    assert_eq!(reset_reason(&actions[at]), DenyReason::TooManySegments);
    assert_eq!(
        at, MAX_DEFERRED,
        "the first {MAX_DEFERRED} pieces were deferred"
    );
}

#[test]
fn large_bodies_pass_without_buffering_and_the_next_request_is_checked() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let mut stream =
        b"GET /api/v2/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n".to_vec();
    // Body bytes that look like a denied request head are body, not a request.
    stream.extend(b"GET /admin HTTP/1.1\r\n\r\n".iter().cycle().take(100_000));
    stream.extend(b"GET /api/v2/next HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.extend(b"5\r\nhello\r\n0\r\n\r\n");
    stream.extend(b"GET /nope HTTP/1.1\r\n\r\n");
    let actions = feed(&mut inspector, &policy, (key(6, 80), 9), &stream, 1400, now);
    let last = actions.len() - 1;
    assert!(actions[..last]
        .iter()
        .all(|a| matches!(a, L7Action::Pass | L7Action::Defer | L7Action::Release)));
    assert!(actions.iter().filter(|a| **a == L7Action::Defer).count() <= 1);
    assert!(
        denied_request(&actions[last]).is_some(),
        "{:?}",
        actions[last]
    );
}

#[test]
fn retransmissions_overlaps_and_gaps() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let k = key(7, 80);
    let seq = u32::MAX - 10; // the stream wraps around the sequence space
    let head = b"GET /api/v2/a HTTP/1.1\r\nHost: a\r\n\r\n";
    let first = start(&mut inspector, &policy, (k, seq), &head[..20], now);
    assert_eq!(first.action, L7Action::Defer);
    // Bytes after a gap are dropped; nothing is fed.
    let gap = inspector.inspect(&segment(k, seq.wrapping_add(25), &head[25..]), now);
    assert_eq!(gap.action, L7Action::Hold);
    // An overlapping segment repeats the deferred bytes and feeds only its
    // new ones: the head completes once, and the deferred segment is
    // released with it.
    let overlap = inspector.inspect(&segment(k, seq, head), now);
    assert_eq!(overlap.action, L7Action::Release);
    assert_eq!(overlap.requests.len(), 1);
    assert!(overlap.requests[0].allowed);
    // Now a retransmission of the released bytes passes.
    let again = inspector.inspect(&segment(k, seq, &head[..20]), now);
    assert_eq!(again.action, L7Action::Pass);

    let next = seq.wrapping_add(head.len() as u32);
    let denied = inspector.inspect(&segment(k, next, b"GET /x HTTP/1.1\r\n\r\n"), now);
    assert!(denied_request(&denied.action).is_some());
    // A client stalled on deferred bytes retransmits them: they are released
    // (no complete request among them) and the head is still decided.
    let k = key(9, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), b"GET /adm", now).action,
        L7Action::Defer
    );
    assert_eq!(
        inspector
            .inspect(&segment(k, 1, b"GET /adm"), now + STALL / 2)
            .action,
        L7Action::Hold,
        "a tail loss probe is dropped"
    );
    assert_eq!(
        inspector
            .inspect(&segment(k, 1, b"GET /adm"), now + STALL)
            .action,
        L7Action::Release,
        "a retransmission timeout releases"
    );
    assert_eq!(
        inspector.inspect(&segment(k, 9, b"in HTT"), now).action,
        L7Action::Defer
    );
    let rest = inspector.inspect(&segment(k, 15, b"P/1.1\r\n\r\n"), now);
    let denial = denied_request(&rest.action);
    assert!(denial.is_some(), "{rest:?}");
    match rest.action {
        L7Action::Deny(denial) => assert_eq!(denial.unsent_from, Some(9)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn retransmissions_must_repeat_what_passed() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let allowed = b"POST /up HTTP/1.1\r\nHost: a.bar.com\r\nContent-Length: 10\r\n\r\n";
    let k = key(50, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), allowed, now).action,
        L7Action::Pass
    );
    let body_at = 1 + allowed.len() as u32;
    let body = inspector.inspect(&segment(k, body_at, b"0123456789"), now);
    assert_eq!(body.action, L7Action::Pass);
    // The same bytes again pass; a body retransmitted with other bytes too
    // (a body's content changes nothing).
    assert_eq!(
        inspector.inspect(&segment(k, 1, allowed), now).action,
        L7Action::Pass
    );
    assert_eq!(
        inspector
            .inspect(&segment(k, body_at, b"abcdefghij"), now)
            .action,
        L7Action::Pass
    );
    // Head bytes that differ: the server may never have had the original.
    let mut altered = allowed.to_vec();
    altered[..4].copy_from_slice(b"GETX");
    let tampered = inspector.inspect(&segment(k, 1, &altered), now);
    assert_eq!(reset_reason(&tampered.action), DenyReason::Retransmission);

    // Part of a remembered segment cannot be checked: reset.
    let k = key(51, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), allowed, now).action,
        L7Action::Pass
    );
    let partial = inspector.inspect(&segment(k, 5, &allowed[4..]), now);
    assert_eq!(reset_reason(&partial.action), DenyReason::Retransmission);

    // Old bytes at the front of a segment with new ones are checked too.
    let k = key(52, 80);
    let get = b"GET /api/v2/a HTTP/1.1\r\n\r\n";
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), get, now).action,
        L7Action::Pass
    );
    let mut both = b"GET /admin/x HTTP/1.1\r\n\r\n".to_vec();
    both.extend_from_slice(get);
    let overlap = inspector.inspect(&segment(k, 1, &both), now);
    assert_eq!(reset_reason(&overlap.action), DenyReason::Retransmission);

    // Passed bytes in front of deferred ones are checked before a release.
    let k = key(53, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), get, now).action,
        L7Action::Pass
    );
    let next = 1 + get.len() as u32;
    let partial = inspector.inspect(&segment(k, next, b"GET /api"), now);
    assert_eq!(partial.action, L7Action::Defer);
    let mut stalled = b"GET /admin/x HTTP/1.1\r\n\r\n".to_vec();
    stalled.extend_from_slice(b"GET /api");
    let retransmitted = inspector.inspect(&segment(k, 1, &stalled), now + STALL);
    assert_eq!(
        reset_reason(&retransmitted.action),
        DenyReason::Retransmission
    );
}

fn reset_reason(action: &L7Action) -> DenyReason {
    match action {
        L7Action::Deny(Denial {
            reason,
            response: L7DenyResponse::Reset,
            ..
        }) => reason.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_http_oversized_and_malformed_heads_are_reset() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let ssh = start(
        &mut inspector,
        &policy,
        (key(8, 80), 1),
        b"SSH-2.0-OpenSSH_9.6\r\n",
        now,
    );
    assert_eq!(reset_reason(&ssh.action), DenyReason::NotHttp);
    let tls = [0x16, 3, 1, 0, 0xc8, 1];
    let binary = start(&mut inspector, &policy, (key(9, 80), 1), &tls, now);
    assert_eq!(reset_reason(&binary.action), DenyReason::NotHttp);
    let mut big = b"GET /api/v2/x HTTP/1.1\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20 * 1024));
    big.extend(b"\r\n\r\n");
    let actions = feed(&mut inspector, &policy, (key(10, 80), 1), &big, 1400, now);
    let first_denial = actions.iter().find(|a| matches!(a, L7Action::Deny(_)));
    assert_eq!(reset_reason(first_denial.unwrap()), DenyReason::Oversized);
    let smuggle =
        b"POST /api/v2/x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
    let ambiguous = start(&mut inspector, &policy, (key(11, 80), 1), smuggle, now);
    assert!(matches!(
        reset_reason(&ambiguous.action),
        DenyReason::Malformed(_)
    ));
}

#[test]
fn reset_response_is_configurable() {
    let policy = ruleset();
    let mut inspector = inspector(16, L7DenyResponse::Reset);
    let get = b"GET /admin HTTP/1.1\r\n\r\n";
    let denied = start(
        &mut inspector,
        &policy,
        (key(12, 80), 1),
        get,
        Instant::now(),
    );
    assert_eq!(
        denied_request(&denied.action),
        Some(("GET", "allow-api", L7DenyResponse::Reset))
    );
}

#[test]
fn lost_state_idle_flows_and_eviction_reset_the_connection() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(2, L7DenyResponse::Forbidden);
    let get = b"GET /api/v2/x HTTP/1.1\r\n\r\n";
    let len = get.len() as u32;
    let lost = |inspection: Inspection| reset_reason(&inspection.action) == DenyReason::StateLost;
    // Agent restart, or payload before the handshake: no state.
    assert!(lost(inspector.inspect(&segment(key(13, 80), 1, get), now)));
    // Idle past the timeout.
    let k = key(14, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), get, now).action,
        L7Action::Pass
    );
    let later = now + Duration::from_secs(61);
    assert!(lost(inspector.inspect(&segment(k, 1 + len, get), later)));
    // Capacity: the least recently used connection is forgotten, and
    // named by the handshake that made room.
    for port in [15, 16] {
        let first = start(&mut inspector, &policy, (key(port, 80), 1), get, now);
        assert_eq!(first.action, L7Action::Pass);
    }
    let syn_ack_17 = syn_ack(key(17, 80), 1);
    let evicted = inspector.handshake(&syn_ack_17, None, (&policy, &NoFqdn), now);
    assert_eq!(evicted, Some(key(15, 80)));
    let first = inspector.inspect(&segment(key(17, 80), 1, get), now);
    assert_eq!(first.action, L7Action::Pass);
    assert_eq!(inspector.len(), 2);
    assert!(lost(
        inspector.inspect(&segment(key(15, 80), 1 + len, get), now)
    ));
    let kept = inspector.inspect(&segment(key(17, 80), 1 + len, get), now);
    assert_eq!(kept.action, L7Action::Pass);
    // A new connection reusing the addresses and ports starts afresh from
    // its SYN-ACK, whatever the old one's stream position.
    let body = b"POST /api/v2/x HTTP/1.1\r\nHost: up.bar.com\r\nContent-Length: 1000\r\n\r\n";
    let k = key(18, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), body, now).action,
        L7Action::Pass
    );
    let reused = start(
        &mut inspector,
        &policy,
        (k, 1 + body.len() as u32),
        b"GET /admin HTTP/1.1\r\n\r\n",
        now,
    );
    assert!(denied_request(&reused.action).is_some());
}

#[test]
fn policy_changes_since_the_syn() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    // No L7 rule decides port 81 any more: everything passes, even non-HTTP.
    let k = key(19, 81);
    let plain = start(&mut inspector, &policy, (k, 1), b"\x00\x01binary", now);
    assert_eq!(plain.action, L7Action::Pass);
    let more = inspector.inspect(&segment(k, 9, b"GET /admin HTTP/1.1\r\n\r\n"), now);
    assert_eq!(more.action, L7Action::Pass);
    // Now dropped: reset.
    let closed = start(
        &mut inspector,
        &policy,
        (key(20, 82), 1),
        b"GET / HTTP/1.1\r\n\r\n",
        now,
    );
    assert_eq!(reset_reason(&closed.action), DenyReason::Policy);
    assert!(matches!(
        policy.admission(&key(21, 80).flow(), &NoFqdn),
        Admission::Inspect(ref rules) if rules.len() == 1
    ));
}

#[test]
fn segments_without_payload_pass() {
    let policy = ruleset();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let now = Instant::now();
    assert_eq!(
        inspector.inspect(&segment(key(22, 80), 1, b""), now).action,
        L7Action::Pass
    );
    inspector.handshake(&syn_ack(key(22, 80), 1), None, (&policy, &NoFqdn), now);
    assert_eq!(
        inspector.inspect(&segment(key(22, 80), 1, b""), now).action,
        L7Action::Pass
    );
}

/// A TLS 1.3-style ClientHello record naming `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let with_len16 = |body: &[u8]| {
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    };
    let mut server_name = vec![0u8];
    server_name.extend(with_len16(name.as_bytes()));
    let mut extension = 0u16.to_be_bytes().to_vec();
    extension.extend(with_len16(&with_len16(&server_name)));
    let mut hello = vec![3, 3];
    hello.extend([7u8; 32]);
    hello.push(0);
    hello.extend(with_len16(&[0x13, 0x01]));
    hello.extend([1, 0]);
    hello.extend(with_len16(&extension));
    let mut handshake = vec![1];
    handshake.extend(&(hello.len() as u32).to_be_bytes()[1..]);
    handshake.extend(hello);
    let mut record = vec![22, 3, 1];
    record.extend(with_len16(&handshake));
    record
}

#[test]
fn tls_server_names_under_a_tls_rule() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let hello = client_hello("api.bar.com");
    let actions = feed(&mut inspector, &policy, (key(40, 443), 1), &hello, 30, now);
    let last = actions.len() - 1;
    assert!(
        actions[..last].iter().all(|a| *a == L7Action::Defer),
        "{actions:?}"
    );
    assert_eq!(actions[last], L7Action::Release);
    // The rest of the stream is encrypted and passes.
    let next = 1 + hello.len() as u32;
    let data = inspector.inspect(&segment(key(40, 443), next, &[23, 3, 3, 0, 1, 9]), now);
    assert_eq!(data.action, L7Action::Pass);

    let other = start(
        &mut inspector,
        &policy,
        (key(41, 443), 1),
        &client_hello("foo.baz.com"),
        now,
    );
    assert!(matches!(
        reset_reason(&other.action),
        DenyReason::ServerName { sni: Some(ref name), .. } if name == "foo.baz.com"
    ));
    let garbled = start(
        &mut inspector,
        &policy,
        (key(42, 443), 1),
        &[22, 3, 1, 0, 4, 2, 0, 0, 0],
        now,
    );
    assert!(matches!(reset_reason(&garbled.action), DenyReason::Tls(_)));
    // Plain HTTP under a tls-only rule: no http alternative allows it.
    let http = start(
        &mut inspector,
        &policy,
        (key(43, 443), 1),
        b"GET / HTTP/1.1\r\n\r\n",
        now,
    );
    assert!(denied_request(&http.action).is_some());
    // A ClientHello under an http-only rule is not HTTP.
    let tls_on_http = start(&mut inspector, &policy, (key(44, 80), 1), &hello, now);
    assert_eq!(reset_reason(&tls_on_http.action), DenyReason::NotHttp);
}

fn tcp_of(
    packet: &[u8],
) -> (
    std::net::IpAddr,
    std::net::IpAddr,
    etherparse::TcpHeader,
    Vec<u8>,
) {
    let sliced = SlicedPacket::from_ip(packet).unwrap();
    let (src, dst) = match sliced.net.unwrap() {
        etherparse::NetSlice::Ipv4(v4) => (
            v4.header().source_addr().into(),
            v4.header().destination_addr().into(),
        ),
        etherparse::NetSlice::Ipv6(v6) => (
            v6.header().source_addr().into(),
            v6.header().destination_addr().into(),
        ),
        etherparse::NetSlice::Arp(_) => panic!("arp"),
    };
    match sliced.transport.unwrap() {
        TransportSlice::Tcp(tcp) => (src, dst, tcp.to_header(), tcp.payload().to_vec()),
        _ => panic!("not tcp"),
    }
}

#[test]
fn forbidden_and_reset_packets_carry_the_right_numbers() {
    let policy = ruleset();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    for (client, server) in [
        ("10.0.0.1:40000", "10.0.0.2:80"),
        ("[fd00::1]:40000", "[fd00::2]:80"),
    ] {
        let k = FlowKey {
            client: client.parse().unwrap(),
            server: server.parse().unwrap(),
        };
        let payload = b"GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
        let seg = Segment {
            ack: 5000,
            ..segment(k, 1000, payload)
        };
        let answer = Segment {
            seq: 4999,
            ..syn_ack(k, 1000)
        };
        inspector.handshake(&answer, None, (&policy, &NoFqdn), Instant::now());
        let L7Action::Deny(denial) = inspector.inspect(&seg, Instant::now()).action else {
            panic!("not denied");
        };
        let packets = deny_packets(&seg, &denial);
        assert_eq!(packets.len(), 2);
        let (src, dst, to_client, body) = tcp_of(&packets[0].packet);
        assert_eq!(
            (src, dst, packets[0].destination),
            (k.server.ip(), k.client.ip(), k.client.ip())
        );
        assert_eq!(
            (to_client.source_port, to_client.destination_port),
            (80, 40000)
        );
        assert_eq!(
            (to_client.sequence_number, to_client.acknowledgment_number),
            (5000, 1000 + payload.len() as u32)
        );
        assert!(to_client.fin && to_client.psh && to_client.ack && !to_client.rst);
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
        assert!(text.contains("Connection: close\r\n"), "{text}");
        assert!(
            text.ends_with(
                "Access denied: GET request not allowed by AntreaClusterNetworkPolicy:api-only rule allow-api\n"
            ),
            "{text}"
        );
        let (src, dst, to_server, body) = tcp_of(&packets[1].packet);
        assert_eq!((src, dst), (k.client.ip(), k.server.ip()));
        assert!(to_server.rst && body.is_empty());
        assert_eq!(to_server.sequence_number, 1000);

        let reset = Denial {
            reason: DenyReason::NotHttp,
            response: L7DenyResponse::Reset,
            unsent_from: Some(900),
        };
        let packets = deny_packets(&seg, &reset);
        let (_, _, to_client, body) = tcp_of(&packets[0].packet);
        assert!(to_client.rst && body.is_empty());
        assert_eq!(to_client.sequence_number, 5000);
        let (_, _, to_server, _) = tcp_of(&packets[1].packet);
        assert_eq!(
            to_server.sequence_number, 900,
            "first byte the server lacks"
        );
    }
}

#[test]
fn segments_and_payload_lengths_from_packets() {
    let mut packet = Vec::new();
    PacketBuilder::ipv6(
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        64,
    )
    .tcp(40000, 80, 77, 1000)
    .ack(9)
    .write(&mut packet, b"GET / HTTP/1.1\r\n\r\n")
    .unwrap();
    let seg = parse_segment(&packet).unwrap();
    assert_eq!((seg.seq, seg.ack, seg.payload.len()), (77, 9, 18));
    assert!(!seg.syn_ack);
    let mut syn_ack = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
        .tcp(80, 40000, 5, 1000)
        .syn()
        .ack(78)
        .write(&mut syn_ack, &[])
        .unwrap();
    let answer = parse_segment(&syn_ack).unwrap();
    assert!(answer.syn_ack);
    assert_eq!(answer.key.reversed(), key(40000, 80));
    assert_eq!(seg.key.server.port(), 80);
    assert_eq!(tcp_payload_len(&packet), Some(18));
    assert_eq!(tcp_payload_len(&packet[..60]), Some(18), "headers suffice");
    assert!(parse_segment(&packet[..50]).is_err());
    let mut udp = Vec::new();
    PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1, 2)
        .write(&mut udp, b"x")
        .unwrap();
    assert_eq!(parse_segment(&udp), Err(SegmentError::NotTcp));
    assert_eq!(tcp_payload_len(&udp), None);
}

proptest::proptest! {
    #[test]
    fn arbitrary_packets_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        let _ = parse_segment(&bytes);
        let _ = tcp_payload_len(&bytes);
    }

    #[test]
    fn arbitrary_streams_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 1..600), piece in 1usize..64) {
        let policy = ruleset();
        let mut inspector = inspector(4, L7DenyResponse::Forbidden);
        let _ = feed(&mut inspector, &policy, (key(30, 80), 3), &bytes, piece, Instant::now());
    }
}

#[test]
fn closed_connections_are_forgotten() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let get = b"GET /api/v2/x HTTP/1.1\r\n\r\n";
    let len = get.len() as u32;
    let mut forgotten = Vec::new();
    let mut sweep = |inspector: &mut Inspector, at| {
        let mut keys = Vec::new();
        inspector.sweep(at, |k| keys.push(k));
        forgotten.extend(keys.iter().copied());
        keys
    };

    // The client's RST: forgotten at once.
    let reset = key(20, 80);
    start(&mut inspector, &policy, (reset, 1), get, now);
    let rst = Segment {
        rst: true,
        ..segment(reset, 1 + len, b"")
    };
    assert_eq!(inspector.inspect(&rst, now).action, L7Action::Pass);
    assert_eq!(inspector.len(), 0);

    // A FIN carrying the last request: decided like any segment, the state
    // kept for CLOSE_GRACE so a retransmission of it still passes.
    let closed = key(21, 80);
    start(&mut inspector, &policy, (closed, 1), get, now);
    let last = inspector.inspect(&fin(closed, 1 + len, get), now);
    assert_eq!(last.action, L7Action::Pass);
    assert!(last.requests[0].allowed);
    let soon = now + CLOSE_GRACE / 2;
    assert!(sweep(&mut inspector, soon).is_empty());
    let again = inspector.inspect(&fin(closed, 1 + len, get), soon);
    assert_eq!(again.action, L7Action::Pass);
    // A bare FIN repeated: no second closing entry.
    inspector.inspect(&fin(closed, 1 + 2 * len, b""), soon);
    assert_eq!(sweep(&mut inspector, now + CLOSE_GRACE), [closed]);
    assert_eq!(inspector.len(), 0);
    // A bare FIN without state (after the grace) passes: it carries nothing.
    let late = inspector.inspect(&fin(closed, 1 + 2 * len, b""), now + CLOSE_GRACE);
    assert_eq!(late.action, L7Action::Pass);

    // A connection reusing the addresses of one that closed keeps its state
    // when the old one's grace ends.
    let reused = key(22, 80);
    start(&mut inspector, &policy, (reused, 1), get, now);
    inspector.inspect(&fin(reused, 1 + len, b""), now);
    let t = now + Duration::from_secs(1);
    start(&mut inspector, &policy, (reused, 5000), get, t);
    assert!(sweep(&mut inspector, now + CLOSE_GRACE).is_empty());
    let next = inspector.inspect(&segment(reused, 5000 + len, get), t);
    assert_eq!(next.action, L7Action::Pass);

    // Silent connections go when idle past the timeout (60 s here), least
    // recently seen first; a connection seen since stays.
    let quiet = key(23, 80);
    let busy = key(24, 80);
    let t2 = t + Duration::from_secs(1);
    start(&mut inspector, &policy, (quiet, 1), get, t2);
    start(&mut inspector, &policy, (busy, 1), get, t2);
    inspector.inspect(&segment(busy, 1 + len, get), t2 + Duration::from_secs(40));
    let swept = sweep(&mut inspector, t2 + Duration::from_secs(61));
    assert_eq!(swept, [reused, quiet]);
    assert_eq!(inspector.len(), 1, "only the busy connection is left");
    assert!(forgotten.contains(&closed));
}

fn strict_inspector(urgent: UrgentData) -> Inspector {
    inspector(16, L7DenyResponse::Forbidden).normalising(urgent, FramingPolicy::Strict)
}

/// A client segment with urgent data.
fn urgent(key: FlowKey, seq: u32, payload: &[u8]) -> Segment<'_> {
    Segment {
        urgent: true,
        ..segment(key, seq, payload)
    }
}

#[test]
fn urgent_data_resets_by_default_even_without_payload() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = strict_inspector(UrgentData::Reset);
    // The case: one urgent byte inside Content-Length.
    let k = key(60, 80);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let first = b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1";
    assert_eq!(
        inspector.inspect(&segment(k, 1, first), now).action,
        L7Action::Defer
    );
    let next = 1 + first.len() as u32;
    let denied = inspector.inspect(&urgent(k, next, b"0\r\n\r\n"), now);
    let L7Action::Deny(denial) = &denied.action else {
        panic!("{denied:?}");
    };
    assert_eq!(denial.reason, DenyReason::UrgentData);
    assert_eq!(denial.response, L7DenyResponse::Reset);
    // The server is reset at the first byte it never got: the deferred one.
    assert_eq!(denial.unsent_from, Some(1));
    assert_eq!(denied.rewrite, None);
    let record = &denied.requests[0];
    assert_eq!(record.detail, Some(Detail::UrgentData { stripped: false }));
    assert!(!record.allowed);
    assert_eq!(
        record.rule.as_ref().unwrap().0.name.as_deref(),
        Some("allow-api")
    );
    assert_eq!(inspector.len(), 0, "forgotten");

    // A pure ACK whose urgent pointer names a later byte.
    let k = key(61, 80);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let ack = inspector.inspect(&urgent(k, 1, b""), now);
    assert_eq!(reset_reason(&ack.action), DenyReason::UrgentData);
    // Over TLS as over HTTP.
    let k = key(62, 443);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let hello = inspector.inspect(&urgent(k, 1, &[22, 3, 1, 0, 5]), now);
    assert_eq!(reset_reason(&hello.action), DenyReason::UrgentData);
}

#[test]
fn stripped_urgent_data_is_inspected_in_band_and_rewritten() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = strict_inspector(UrgentData::Strip);
    let k = key(63, 80);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let first = b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1";
    assert_eq!(
        inspector.inspect(&segment(k, 1, first), now).action,
        L7Action::Defer
    );
    let next = 1 + first.len() as u32;
    // The byte "0" stays in the stream: `Content-Length: 10` on a GET.
    let rest = inspector.inspect(&urgent(k, next, b"0\r\n\r\n"), now);
    assert_eq!(rest.rewrite, Some(Rewrite::ClearUrgent));
    let L7Action::Deny(denial) = &rest.action else {
        panic!("{rest:?}");
    };
    assert!(matches!(
        &denial.reason,
        DenyReason::Framing { why: crate::http::Ambiguity::BodyOn { method }, .. } if method == "GET"
    ));
    assert_eq!(denial.response, L7DenyResponse::Forbidden);
    let body = super::response::forbidden_body(&denial.reason);
    assert!(body.contains("strict framing: body on GET"), "{body}");
    assert!(body.contains("allow-api"), "{body}");
    let details: Vec<_> = rest.requests.iter().map(|r| r.detail.clone()).collect();
    assert_eq!(
        details,
        [
            Some(Detail::UrgentData { stripped: true }),
            Some(Detail::Framing(crate::http::Ambiguity::BodyOn {
                method: "GET".into()
            }))
        ]
    );

    // An allowed request with an urgent byte passes, rewritten.
    let k = key(64, 80);
    let get = b"GET /api/v2/y HTTP/1.1\r\nHost: a\r\n\r\n";
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let passed = inspector.inspect(&urgent(k, 1, get), now);
    assert_eq!(passed.action, L7Action::Pass);
    assert_eq!(passed.rewrite, Some(Rewrite::ClearUrgent));
    assert!(passed.requests[1].allowed);
    // `../../admin` with an urgent byte in front of it is read in-band:
    // `/api/v2/x/../../admin` is `/admin`, and denied.
    let k = key(65, 80);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let dots = inspector.inspect(
        &urgent(
            k,
            1,
            b"GET /api/v2/x/../../admin HTTP/1.1\r\nHost: a\r\n\r\n",
        ),
        now,
    );
    assert!(denied_request(&dots.action).is_some(), "{dots:?}");
}

#[test]
fn strict_framing_denies_with_a_403_naming_the_reason() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = strict_inspector(UrgentData::Reset);
    for (port, raw, why) in [
        (
            70,
            &b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\nContent-Length: 38\r\n\r\nDELETE /admin/secret HTTP/1.1\r\nHost: b\r\n\r\n"[..],
            "strict framing: body on GET",
        ),
        (
            71,
            b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n",
            "strict framing: obsolete line folding",
        ),
        (72, b"GET /api/v2/x HTTP/1.1\nHost: a\n\n", "strict framing: bare LF"),
        (
            73,
            b"POST /p HTTP/1.1\r\nHost: x.bar.com\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
            "strict framing: duplicate Content-Length",
        ),
    ] {
        let got = start(&mut inspector, &policy, (key(port, 80), 1), raw, now);
        let L7Action::Deny(denial) = &got.action else {
            panic!("{got:?}");
        };
        assert_eq!(denial.response, L7DenyResponse::Forbidden);
        let body = super::response::forbidden_body(&denial.reason);
        assert!(body.contains(why), "{body}");
        let record = got.requests.last().unwrap();
        assert!(!record.allowed);
        assert_eq!(record.detail.as_ref().unwrap().to_string(), why);
        assert!(record.rule.is_some());
    }
}

/// `segment` carrying timestamp `value` (echoing the server's 1).
fn stamped(segment: Segment<'_>, value: u32) -> Segment<'_> {
    Segment {
        timestamp: Some(Timestamp { value, echo: 1 }),
        ..segment
    }
}

/// The server's SYN-ACK of a connection that uses timestamps: the client's
/// SYN carried `value`.
fn syn_ack_stamped(key: FlowKey, seq: u32, value: u32) -> Segment<'static> {
    Segment {
        timestamp: Some(Timestamp {
            value: 1,
            echo: value,
        }),
        ..syn_ack(key, seq)
    }
}

/// An allowed head and a denied one of the same length.
const ALLOWED: &[u8] = b"GET /api/v2/x HTTP/1.1\r\nHost: a\r\n\r\n";
const HIDDEN: &[u8] = b"GET /admin/xx HTTP/1.1\r\nHost: a\r\n\r\n";

#[test]
fn withheld_bytes_are_pinned_like_passed_ones() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    let first = &ALLOWED[..16];
    // The attack: the first part of an allowed head in a segment
    // the server discards for a reason tollgate cannot see, then other
    // bytes of the same length and the rest of the head.
    let k = key(80, 80);
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), first, now).action,
        L7Action::Defer
    );
    let rewrite = inspector.inspect(&segment(k, 1, HIDDEN), now);
    let L7Action::Deny(denial) = &rewrite.action else {
        panic!("{rewrite:?}");
    };
    assert_eq!(denial.reason, DenyReason::Retransmission);
    assert_eq!(denial.response, L7DenyResponse::Reset);
    assert_eq!(
        denial.unsent_from,
        Some(1),
        "the server lacks the first byte"
    );
    assert!(rewrite.requests.is_empty(), "no request judged");
    assert!(inspector.is_empty());
    // With a stall between the copies: the rewrite alone, then the rest.
    let k = key(81, 80);
    start(&mut inspector, &policy, (k, 1), first, now);
    let stalled = inspector.inspect(&segment(k, 1, &HIDDEN[..16]), now + STALL);
    assert_eq!(
        reset_reason(&stalled.action),
        DenyReason::Retransmission,
        "the stall releases only a faithful copy"
    );
    // A faithful copy after the stall releases; the rest is still decided.
    let k = key(82, 80);
    start(&mut inspector, &policy, (k, 1), first, now);
    let copy = inspector.inspect(&segment(k, 1, first), now + STALL);
    assert_eq!(copy.action, L7Action::Release);
    let rest = inspector.inspect(&segment(k, 17, &ALLOWED[16..]), now + STALL);
    assert_eq!(rest.action, L7Action::Pass);
    assert!(rest.requests[0].allowed);
    // A copy of withheld bytes followed by new ones, faithful: released.
    let k = key(83, 80);
    start(&mut inspector, &policy, (k, 1), first, now);
    let whole = inspector.inspect(&segment(k, 1, ALLOWED), now);
    assert_eq!(whole.action, L7Action::Release);
    // A copy starting inside a withheld segment cannot be checked: reset.
    let k = key(84, 80);
    start(&mut inspector, &policy, (k, 1), first, now);
    let inside = inspector.inspect(&segment(k, 5, &ALLOWED[4..]), now);
    assert_eq!(reset_reason(&inside.action), DenyReason::Retransmission);
    // A withheld ClientHello is held to the same rule under `tls: {sni}`.
    let (hello, other) = (client_hello("api.bar.com"), client_hello("api.baz.com"));
    assert_eq!(hello.len(), other.len());
    let k = key(85, 443);
    let most = &hello[..hello.len() - 2];
    assert_eq!(
        start(&mut inspector, &policy, (k, 1), most, now).action,
        L7Action::Defer
    );
    let rewritten = inspector.inspect(&segment(k, 1, &other), now + STALL);
    assert_eq!(reset_reason(&rewritten.action), DenyReason::Retransmission);
}

#[test]
fn segments_the_receiver_discards_are_dropped_unread() {
    let policy = ruleset();
    let now = Instant::now();
    let mut inspector = inspector(16, L7DenyResponse::Forbidden);
    // The attack with a PAWS-old first copy (older than the SYN's
    // timestamp, which the SYN-ACK echoes): dropped unread, so the rewrite
    // is judged as what it is.
    let k = key(90, 80);
    inspector.handshake(&syn_ack_stamped(k, 1, 1000), None, (&policy, &NoFqdn), now);
    let old = inspector.inspect(&stamped(segment(k, 1, &ALLOWED[..16]), 999), now);
    assert_eq!(old.action, L7Action::Discard(Discard::Paws));
    assert!(old.requests.is_empty());
    let rewrite = inspector.inspect(&stamped(segment(k, 1, HIDDEN), 1000), now);
    assert!(denied_request(&rewrite.action).is_some(), "{rewrite:?}");

    // Timestamps only rise; a segment dropped for a gap raises nothing.
    let k = key(91, 80);
    inspector.handshake(&syn_ack_stamped(k, 1, 1000), None, (&policy, &NoFqdn), now);
    let len = ALLOWED.len() as u32;
    let at = |n: u32| 1 + n * len;
    let mut send = |seq, ts| {
        let seg = stamped(segment(k, seq, ALLOWED), ts);
        inspector.inspect(&seg, now).action
    };
    assert_eq!(send(at(0), 1000), L7Action::Pass, "as old as the SYN's");
    assert_eq!(send(at(1), 1500), L7Action::Pass);
    assert_eq!(send(at(2), 1499), L7Action::Discard(Discard::Paws));
    assert_eq!(send(at(3), 9000), L7Action::Hold, "after a gap");
    assert_eq!(send(at(2), 1600), L7Action::Pass);
    // The sequence space of timestamps wraps.
    assert_eq!(
        send(at(3), 1600u32.wrapping_add(1 << 31) - 1),
        L7Action::Pass
    );

    // Acknowledgments only rise, from the SYN-ACK's sequence number + 1.
    let k = key(92, 80);
    inspector.handshake(&syn_ack(k, 1), None, (&policy, &NoFqdn), now);
    let mut send = |seq, ack| {
        let seg = Segment {
            ack,
            ..segment(k, seq, ALLOWED)
        };
        inspector.inspect(&seg, now).action
    };
    assert_eq!(
        send(at(0), SERVER_NEXT - 1),
        L7Action::Discard(Discard::StaleAck)
    );
    assert_eq!(send(at(0), SERVER_NEXT), L7Action::Pass);
    assert_eq!(send(at(1), SERVER_NEXT + 900), L7Action::Pass);
    assert_eq!(
        send(at(2), SERVER_NEXT + 899),
        L7Action::Discard(Discard::StaleAck)
    );
    // Without timestamps in the SYN-ACK, a segment's timestamp means nothing.
    assert_eq!(
        inspector
            .inspect(&stamped(segment(k, at(2), ALLOWED), 0), now)
            .action,
        L7Action::Discard(Discard::StaleAck),
        "still judged by its acknowledgment"
    );
    let fresh = Segment {
        ack: SERVER_NEXT + 900,
        ..stamped(segment(k, at(2), ALLOWED), 0)
    };
    assert_eq!(inspector.inspect(&fresh, now).action, L7Action::Pass);

    // What the segment alone shows, also on a RST: dropped, nothing
    // forgotten; a RST with old numbers still closes the connection.
    let k = key(93, 80);
    inspector.handshake(&syn_ack_stamped(k, 1, 1000), None, (&policy, &NoFqdn), now);
    let flows = inspector.len();
    let corrupt_rst = Segment {
        rst: true,
        discard: Some(Discard::Checksum),
        ..segment(k, 1, b"")
    };
    assert_eq!(
        inspector.inspect(&corrupt_rst, now).action,
        L7Action::Discard(Discard::Checksum)
    );
    assert_eq!(inspector.len(), flows, "kept");
    let rst = Segment {
        rst: true,
        ack: 0,
        ..stamped(segment(k, 1, b""), 1)
    };
    assert_eq!(inspector.inspect(&rst, now).action, L7Action::Pass);
    assert_eq!(inspector.len(), flows - 1, "forgotten");
}
