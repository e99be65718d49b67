//! The controller's pure part at cluster scale, on the cluster of the
//! `incremental` bench (150,000 Pods in 1,500 Namespaces, 500
//! ClusterNetworkPolicies whose egress uses `Self`, every 50th allowing
//! from every Pod):
//! - `span`: every Pod and Node selection the policies use on any Node
//!   (`compile::published_selections` over the Pods' shapes), what the
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

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use tollgate_core::compile::{published_selections, PodShape};
use tollgate_core::model::Snapshot;
use tollgate_core::selection::{Delta, PodEntry, Publisher};

#[path = "cluster/mod.rs"]
mod cluster;
use cluster::{app_of, of_this_run, parse, pod, policy_side_yaml, Cluster};

/// The Namespaces and policies of the cluster (no Nodes: the span reads
/// none here).
fn policies(cluster: &Cluster) -> Snapshot {
    Snapshot {
        objects: parse(&policy_side_yaml(cluster, false, None, false)),
    }
}

fn put(publisher: &mut Publisher, pod: PodEntry) {
    publisher.apply(Delta::Pod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        pod: Some(pod),
    });
}

fn controller(c: &mut Criterion) {
    let cluster = of_this_run();
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
        put(&mut publisher, pod(cluster, i, app_of(cluster, i), 0));
    }
    let shapes: BTreeSet<PodShape> = publisher.shapes().cloned().collect();
    let inventory = started.elapsed();
    let started = Instant::now();
    let selections = published_selections(&snapshot, &shapes);
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
        b.iter(|| black_box(published_selections(&snapshot, &shapes)))
    });
    let remote = 10;
    group.bench_function("status-write", |b| {
        b.iter(|| {
            let mut written = pod(cluster, remote, remote % 100, 0);
            written.node_name = Some("node-elsewhere".into());
            put(&mut publisher, written);
            black_box(publisher.writes())
        })
    });
    let mut app = remote % 100;
    group.bench_function("label-change", |b| {
        b.iter(|| {
            app = if app == remote % 100 { 3 } else { remote % 100 };
            put(&mut publisher, pod(cluster, remote, app, 0));
            black_box(publisher.writes())
        })
    });
    group.finish();
}

criterion_group!(benches, controller);
criterion_main!(benches);
