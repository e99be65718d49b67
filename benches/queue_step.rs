//! Cost of the worker's pure step on the first packet of a connection:
//! parsing a 128-byte queue copy to a `Flow` (IPv4 and IPv6 TCP SYN), and
//! the whole step (parse, classify against an empty compiled ruleset, mark),
//! the step when a logged rule decides (the audit record is built), and
//! the metrics a worker records per decided connection.
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
        tollgate::source::parse_documents(std::path::Path::new("bench.yaml"), yaml);
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
