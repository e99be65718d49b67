//! The L7 queue's own work per segment, without the kernel round trip:
//! `l7::Gate::segment` (packet parse, normalisation, stream following,
//! head parse and rule match, verdict) on client segments as Linux sends
//! them (IPv4, timestamps, checksums filled in) on an established
//! connection: a keep-alive GET per segment, and full-size body segments
//! of an upload. Complements `benches/e2e.sh l7`, whose figure on a shared
//! machine moves more than this work costs.
//! Run: `cargo bench --bench l7_gate`.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::hint::black_box;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use etherparse::PacketBuilder;
use tollgate_core::compile::{compile, LocalNode};
use tollgate_core::decode::parse_documents;
use tollgate_core::fqdn::NoFqdn;
use tollgate_core::http::DEFAULT_MAX_HEAD;
use tollgate_core::l7::{DenyResponse, Gate, Inspector, MAX_DEFERRED_TOTAL};
use tollgate_core::marks::MarkLayout;
use tollgate_core::model::Snapshot;
use tollgate_core::packet::{Action, Queued};
use tollgate_core::ruleset::Ruleset;

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench-l7}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {}}]
  ingress:
  - name: allow-api
    action: Allow
    ports: [{protocol: TCP, port: 80}]
    l7Protocols:
    - http: {method: GET, path: /api/*}
    - http: {method: POST, path: /upload/*}
";

const REQUEST: &[u8] = b"GET /api/bench HTTP/1.1\r\nHost: 10.98.2.2\r\nUser-Agent: wrk\r\n\r\n";
/// Segments per batch.
const BATCH: usize = 1000;
const CLIENT: [u8; 4] = [10, 98, 1, 2];
const SERVER: [u8; 4] = [10, 98, 2, 2];
const ISN: u32 = 1_000_000;

fn ruleset() -> Ruleset {
    let (objects, problems) = parse_documents(Path::new("bench.yaml"), POLICY);
    assert!(problems.is_empty(), "{problems:?}");
    let local = LocalNode {
        name: "bench".into(),
        labels: Default::default(),
        addresses: vec![IpAddr::from(SERVER)],
    };
    compile(&Snapshot { objects }, &local)
}

/// NOP, NOP, timestamp: how Linux starts the options of every segment.
fn timestamp(value: u32, echo: u32) -> Vec<u8> {
    let mut option = vec![1, 1, 8, 10];
    option.extend(value.to_be_bytes());
    option.extend(echo.to_be_bytes());
    option
}

/// A gate that has seen the server's SYN-ACK of one connection.
fn gate(policy: &Ruleset, now: Instant) -> Gate {
    let inspector = Inspector::new(
        NonZeroUsize::new(65_536).unwrap(),
        Duration::from_secs(600),
        DEFAULT_MAX_HEAD,
        DenyResponse::Forbidden,
    );
    let mut gate = Gate::new(inspector, MAX_DEFERRED_TOTAL, MarkLayout::default());
    let mut syn_ack = Vec::new();
    PacketBuilder::ipv4(SERVER, CLIENT, 64)
        .tcp(80, 40_000, 5000, 65_160)
        .syn()
        .ack(ISN)
        .options_raw(&timestamp(7, 100))
        .unwrap()
        .write(&mut syn_ack, &[])
        .unwrap();
    gate.segment(&queued(u32::MAX, &syn_ack), (policy, &NoFqdn), now);
    gate
}

fn queued(id: u32, payload: &[u8]) -> Queued<'_> {
    Queued {
        id,
        payload,
        mark: 0,
        indev: 0,
        local: None,
    }
}

/// The connection's next `BATCH` client segments from `first`: each
/// `payload`, sequence numbers and timestamps rising.
fn segments(first: &[u8], payload: &[u8]) -> Vec<Vec<u8>> {
    let mut seq = ISN;
    let mut out = Vec::with_capacity(BATCH + 1);
    for (i, data) in std::iter::once(first)
        .chain(std::iter::repeat_n(payload, BATCH))
        .enumerate()
    {
        let mut packet = Vec::new();
        PacketBuilder::ipv4(CLIENT, SERVER, 64)
            .tcp(40_000, 80, seq, 502)
            .ack(5001)
            .psh()
            .options_raw(&timestamp(100 + i as u32, 7))
            .unwrap()
            .write(&mut packet, data)
            .unwrap();
        seq = seq.wrapping_add(data.len() as u32);
        out.push(packet);
    }
    out
}

fn bench(c: &mut Criterion) {
    let policy = &ruleset();
    let mut group = c.benchmark_group("l7_gate");
    group.throughput(Throughput::Elements(BATCH as u64));
    let run = |first: &[u8], payload: &[u8]| {
        let packets = segments(first, payload);
        move |b: &mut criterion::Bencher<'_>| {
            b.iter_batched(
                || {
                    let now = Instant::now();
                    let mut gate = gate(policy, now);
                    let step = gate.segment(&queued(0, &packets[0]), (policy, &NoFqdn), now);
                    assert_eq!(step.verdicts, [(0, Action::Accept)]);
                    (gate, now)
                },
                |(mut gate, now)| {
                    for (id, packet) in packets.iter().enumerate().skip(1) {
                        let step = gate.segment(
                            &queued(id as u32, black_box(packet)),
                            (policy, &NoFqdn),
                            now,
                        );
                        debug_assert_eq!(step.verdicts, [(id as u32, Action::Accept)]);
                        black_box(step);
                    }
                    gate
                },
                BatchSize::SmallInput,
            )
        }
    };
    group.bench_function("keep-alive GET per segment", run(REQUEST, REQUEST));
    let upload = format!(
        "POST /upload/x HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        1448 * BATCH
    );
    group.bench_function(
        "1448-byte body segment",
        run(upload.as_bytes(), &[b'x'; 1448]),
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
