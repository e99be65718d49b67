//! The controller's pure part at cluster scale, on the cluster of the
//! `incremental` bench (150,000 Pods in 1,500 Namespaces, 500
//! ClusterNetworkPolicies whose egress uses `Self`, every 50th allowing
//! from every Pod):
//! - `span`: every Pod selection the policies use on any Node
//!   (`compile::pod_selections` over the Pods' shapes), what the
//!   controller computes again when a policy changes or a Pod of a new
//!   shape appears;
//! - `status-write`: a Pod written again with nothing a slice holds
//!   changed: no write;
//! - `label-change`: a Pod's `app` label moves it between selections:
//!   the writes of the slices it left and joined;
//! - the first publication (selections set, every slice written) is
//!   printed once.
//!
//! `cargo bench -p tollgate-core --bench controller`; a smoke run
//! (`cargo test --bench controller`) uses 1/100 of the cluster.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_core::compile::{pod_selections, PodShape};
use tollgate_core::model::Snapshot;
use tollgate_core::selection::{Delta, PodEntry, Publisher};

struct Cluster {
    pods: usize,
    namespaces: usize,
    policies: usize,
}

const FULL: Cluster = Cluster {
    pods: 150_000,
    namespaces: 1_500,
    policies: 500,
};

const SMOKE: Cluster = Cluster {
    pods: 1_500,
    namespaces: 15,
    policies: 50,
};

fn pod(cluster: &Cluster, i: usize, app: usize) -> PodEntry {
    PodEntry {
        namespace: format!("ns-{}", i % cluster.namespaces),
        name: format!("pod-{i}"),
        labels: BTreeMap::from([
            ("app".to_string(), format!("app-{app}")),
            ("tier".to_string(), ["fe", "be"][i % 2].to_string()),
        ]),
        ips: vec![IpAddr::V4(Ipv4Addr::new(
            10,
            (i / 65536) as u8,
            ((i / 256) % 256) as u8,
            (i % 256) as u8,
        ))],
        service_account: "default".into(),
        node_name: Some(format!("node-{}", i % 5_000)),
        named_ports: Vec::new(),
        host_ports: Vec::new(),
    }
}

fn policies(cluster: &Cluster) -> Snapshot {
    let mut yaml = String::new();
    for n in 0..cluster.namespaces {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns-{n}\n  labels: {{team: t{}}}\n---\n",
            n % 10
        ));
    }
    for k in 0..cluster.policies {
        let everyone = if k % 50 == 0 {
            "\n  - action: Allow\n    from: [{namespaceSelector: {}}]"
        } else {
            ""
        };
        yaml.push_str(&format!(
            "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: p-{k}}}
spec:
  priority: {}
  appliedTo: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]
  ingress:
  - action: Allow
    from: [{{podSelector: {{matchLabels: {{app: app-{}}}}}, namespaceSelector: {{matchLabels: {{team: t{}}}}}}}]{everyone}
  egress:
  - action: Allow
    to: [{{namespaces: {{match: Self}}, podSelector: {{matchLabels: {{app: app-{}}}}}}}]
---
",
            1 + k,
            k % 100,
            (k + 1) % 100,
            k % 10,
            (k + 2) % 100
        ));
    }
    let (objects, problems) = tollgate_core::decode::parse_documents("bench.yaml".as_ref(), &yaml);
    assert!(problems.is_empty(), "{problems:?}");
    Snapshot { objects }
}

fn put(publisher: &mut Publisher, pod: PodEntry) {
    publisher.apply(Delta::Pod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        pod: Some(pod),
    });
}

fn controller(c: &mut Criterion) {
    let cluster = if smoke() { &SMOKE } else { &FULL };
    let snapshot = policies(cluster);
    let mut publisher = Publisher::new();
    for object in snapshot.iter() {
        if let Some(delta @ Delta::Namespace { .. }) = Delta::apply(object) {
            publisher.apply(delta);
        }
    }
    let started = Instant::now();
    for i in 0..cluster.pods {
        // Several apps in each Namespace (as the `incremental` bench).
        put(&mut publisher, pod(cluster, i, (i + i / 5_000) % 100));
    }
    let shapes: BTreeSet<PodShape> = publisher.shapes().cloned().collect();
    let inventory = started.elapsed();
    let started = Instant::now();
    let selections = pod_selections(&snapshot, &shapes);
    let span = started.elapsed();
    let started = Instant::now();
    let count = selections.len();
    publisher.set_selections(selections);
    let writes = publisher.writes();
    eprintln!(
        "controller: {} Pods ({} shapes) in {inventory:?}; span: {count} selections in {span:?}; first publication: {} slices in {:?}",
        cluster.pods,
        shapes.len(),
        writes.len(),
        started.elapsed()
    );
    let mut group = c.benchmark_group("controller");
    group.sample_size(10);
    group.bench_function("span", |b| {
        b.iter(|| black_box(pod_selections(&snapshot, &shapes)))
    });
    let remote = 10;
    group.bench_function("status-write", |b| {
        b.iter(|| {
            let mut written = pod(cluster, remote, remote % 100);
            written.node_name = Some("node-elsewhere".into());
            put(&mut publisher, written);
            black_box(publisher.writes())
        })
    });
    let mut app = remote % 100;
    group.bench_function("label-change", |b| {
        b.iter(|| {
            app = if app == remote % 100 { 3 } else { remote % 100 };
            put(&mut publisher, pod(cluster, remote, app));
            black_box(publisher.writes())
        })
    });
    group.finish();
}

/// Whether this is `cargo test --bench controller` (CI's smoke run: no
/// `--bench` argument) rather than `cargo bench`.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

criterion_group!(benches, controller);
criterion_main!(benches);
