//! Cost of the worker's pure step on the first packet of a connection:
//! parsing a 128-byte queue copy to a `Flow` (IPv4 and IPv6 TCP SYN), and
//! the whole step (parse, classify against an empty compiled ruleset, mark),
//! the step when a logged rule decides (the audit record is built), and
//! the metrics a worker records per decided connection; and the NFQUEUE
//! wire work per packet: reading a packet message off a received buffer,
//! and building a round of 32 verdicts (one batch message, or 32 messages
//! when every verdict carries its own mark).
//!
//! `cargo bench --bench queue_step`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use etherparse::{IpHeaders, PacketBuilder, PacketBuilderStep};
use tollgate::audit::Timestamp;
use tollgate::compile::{compile, LocalNode};
use tollgate::decide::{step, StepConfig};
use tollgate::fqdn::NoFqdn;
use tollgate::marks::{FailMode, MarkLayout};
use tollgate::model::Snapshot;
use tollgate::packet::flow::Verdict;
use tollgate::packet::nfqueue::{self, Outgoing, Plain};
use tollgate::packet::{parse_flow, Queued};
use tollgate::ruleset::Ruleset;

/// A TCP SYN with 200 bytes of payload, cut to the 128-byte queue copy.
fn syn(builder: PacketBuilderStep<IpHeaders>) -> Vec<u8> {
    let mut out = Vec::new();
    builder
        .tcp(40000, 443, 1, 64240)
        .syn()
        .write(&mut out, &[0; 200])
        .unwrap();
    out.truncate(128);
    out
}

fn bench(c: &mut Criterion) {
    let v4 = syn(PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64));
    let v6 = syn(PacketBuilder::ipv6([0xfd; 16], [0xfe; 16], 64));
    c.bench_function("parse_flow/tcp-syn-v4", |b| {
        b.iter(|| parse_flow(black_box(&v4)))
    });
    c.bench_function("parse_flow/tcp-syn-v6", |b| {
        b.iter(|| parse_flow(black_box(&v6)))
    });
    let ruleset = compile(&Snapshot::default(), &LocalNode::default());
    let config = StepConfig {
        marks: MarkLayout::default(),
        fail_mode: FailMode::Closed,
    };
    c.bench_function("step/tcp-syn-v4-empty-ruleset", |b| {
        b.iter(|| step(&queued(black_box(&v4)), &ruleset, &NoFqdn, &config, NOW))
    });
    let logged = logged_drop_ruleset();
    c.bench_function("step/tcp-syn-v4-logged-drop", |b| {
        b.iter(|| {
            let s = step(&queued(black_box(&v4)), &logged, &NoFqdn, &config, NOW);
            assert_eq!(s.audit.len(), 1);
            s
        })
    });
    // What a worker adds per decided connection: the verdict and rule-hit
    // counters, and the latency histogram.
    let shared = std::sync::Arc::new(tollgate::telemetry::Metrics::new());
    let latency = shared.queue_latency(100);
    let mut metrics = tollgate::telemetry::WorkerMetrics::new(shared);
    let decided = step(&queued(&v4), &logged, &NoFqdn, &config, NOW);
    let tollgate::decide::Outcome::Decided { by, .. } = decided.outcome else {
        panic!("a rule decides");
    };
    c.bench_function("metrics/verdict-rule-hit-and-latency", |b| {
        b.iter(|| {
            metrics.decided(Verdict::Drop, black_box(&by));
            latency.observe(20e-6);
        })
    });
    wire(c, &v4);
}

/// Parse of one packet message, and verdict rounds of 32 packets: planned
/// and built, as a batch (one plain verdict) and one by one (a mark each).
fn wire(c: &mut Criterion, payload: &[u8]) {
    let message = packet_message(7, payload);
    c.bench_function("nfqueue/parse-packet-message", |b| {
        b.iter(|| {
            for message in nfqueue::messages(black_box(&message)) {
                black_box(message.unwrap());
            }
        })
    });
    let mut out = Vec::with_capacity(4096);
    for (name, plain) in [
        ("nfqueue/verdicts-32-accept-batched", |_| Plain::Accept),
        ("nfqueue/verdicts-32-repeat-each-mark", |k: u64| {
            Plain::Repeat { mark: k as u32 }
        }),
    ] as [(&str, fn(u64) -> Plain); 2]
    {
        let round: Vec<(u64, Option<Plain>)> = (1..=32).map(|k| (k, Some(plain(k)))).collect();
        c.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                for (seq, send) in nfqueue::plan_verdicts(black_box(&round), None)
                    .into_iter()
                    .enumerate()
                {
                    let (index, batch) = match send {
                        Outgoing::Batch { last, .. } => (last, true),
                        Outgoing::One { index } => (index, false),
                    };
                    let (key, plain) = round[index];
                    let plain = plain.unwrap();
                    if batch {
                        nfqueue::verdict_batch(&mut out, seq as u32, 100, key as u32, plain);
                    } else {
                        nfqueue::verdict(&mut out, seq as u32, 100, key as u32, plain, None);
                    }
                }
                black_box(out.len())
            })
        });
    }
}

/// An NFQUEUE packet message of queue 100 as the kernel sends it: packet
/// header, mark, in-interface, timestamp-sized filler, payload.
fn packet_message(id: u32, payload: &[u8]) -> Vec<u8> {
    fn attribute(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
        let length = 4 + value.len();
        out.extend_from_slice(&(length as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        out.resize(out.len() + (4 - length % 4) % 4, 0);
    }
    let mut body = vec![2, 0, 0, 100];
    let mut header = id.to_be_bytes().to_vec();
    header.extend_from_slice(&[0x08, 0x00, 1]);
    attribute(&mut body, 1, &header);
    attribute(&mut body, 3, &0u32.to_be_bytes());
    attribute(&mut body, 5, &2u32.to_be_bytes());
    attribute(&mut body, 4, &[0; 16]);
    attribute(&mut body, 10, payload);
    let mut message = Vec::new();
    message.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
    message.extend_from_slice(&(3u16 << 8).to_ne_bytes());
    message.extend_from_slice(&[0; 10]);
    message.extend_from_slice(&body);
    message
}

/// A packet queued from FORWARD with no mark.
fn queued(payload: &[u8]) -> Queued<'_> {
    Queued {
        id: 1,
        payload,
        mark: 0,
        local: None,
        indev: 0,
    }
}

const NOW: Timestamp = Timestamp {
    unix_micros: 1_700_000_000_000_000,
};

/// The node (10.0.0.2) drops and logs TCP 443 from 10.0.0.0/24.
fn logged_drop_ruleset() -> Ruleset {
    let yaml = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: logged}
spec:
  priority: 1
  appliedTo: [{nodeSelector: {}}]
  ingress:
  - action: Drop
    name: drop-443
    enableLogging: true
    logLabel: bench
    from: [{ipBlock: {cidr: 10.0.0.0/24}}]
    ports: [{protocol: TCP, port: 443}]
";
    let (objects, problems) =
        tollgate::decode::parse_documents(std::path::Path::new("bench.yaml"), yaml);
    assert!(problems.is_empty(), "{problems:?}");
    let node = LocalNode {
        name: "n".into(),
        labels: Default::default(),
        addresses: vec!["10.0.0.2".parse().unwrap()],
    };
    compile(&Snapshot { objects }, &node)
}

criterion_group!(benches, bench);
criterion_main!(benches);
