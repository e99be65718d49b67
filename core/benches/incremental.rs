//! The cost of one change to the incremental compiler
//! (`compile::Incremental`) at cluster scale: 150,000 Pods in 1,500
//! Namespaces on 5,000 Nodes (30 on the local one, of 30 apps), 500
//! ClusterNetworkPolicies (policy k applies to `app-<k % 100>`, allows from
//! `app-<(k+1) % 100>` in the Namespaces of team `t<k % 10>`, egress to
//! `app-<(k+2) % 100>` of its own Namespace (`Self`); every 50th also
//! allows from every Pod: a selection of all 150,000).
//!
//! Each benchmark is one change and the ruleset after it:
//! - `remote-status`: a Pod of another Node written again unchanged (a
//!   status write): nothing to do;
//! - `remote-address`: a Pod of another Node changes address: the sets
//!   that hold it are patched (the all-Pods set among them);
//! - `remote-label`: a Pod of another Node changes `app` label, into
//!   and out of a set a rule here uses;
//! - `local-label`: a local Pod changes `app` label: the rules are
//!   assembled again over the local endpoints;
//! - `namespace-label`: a Namespace changes its team label;
//! - `policy-edit`: one policy's `appliedTo` label changes (in both, the
//!   policy side shares every other object with the last one, as a
//!   Kubernetes source's snapshots do);
//! - `full-compile`: the baseline, `compile` of the same inventory as one
//!   snapshot (what every change cost before);
//! - `snapshot-remote-label`: the agent's path for `remote-label`, its
//!   source handing the whole snapshot (`Incremental::update` compares
//!   every member);
//! - `validate-whole`, `validate-kept`: an admission's validation of the
//!   policy side after a policy edit, whole (`validate::check`) and by a
//!   `validate::Checker` kept across admissions.
//!
//! `cargo bench -p tollgate-core --bench incremental`; a smoke run
//! (`cargo test --bench incremental`) uses 1/100 of the cluster.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use tollgate_core::compile::{compile, policy_side, Incremental, LocalNode};
use tollgate_core::model::{Snapshot, Sourced};
use tollgate_core::selection::{Delta, PodEntry};
use tollgate_core::validate::{check, Checker};

#[path = "cluster/mod.rs"]
mod cluster;
use cluster::{app_of, of_this_run, parse, pod, policy_side_yaml, Cluster};

fn local() -> LocalNode {
    LocalNode {
        name: "node-0".into(),
        ..LocalNode::default()
    }
}

fn built(cluster: &Cluster) -> Incremental {
    let started = Instant::now();
    let snapshot = Snapshot {
        objects: parse(&policy_side_yaml(cluster, true, None, false)),
    };
    let mut incremental = Incremental::new(&snapshot, &local());
    for i in 0..cluster.pods {
        let pod = pod(cluster, i, app_of(cluster, i), 0);
        incremental.apply(Delta::Pod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            pod: Some(pod),
        });
    }
    let ruleset = incremental.ruleset().expect("the first ruleset");
    eprintln!(
        "incremental: {} Pods, {} policies: first ruleset in {:?} ({} rule instances, {} endpoints, {} selections)",
        cluster.pods,
        cluster.policies,
        started.elapsed(),
        ruleset.rule_count(),
        ruleset.endpoints().len(),
        incremental.selections().selections().count()
    );
    incremental
}

fn apply(incremental: &mut Incremental, pod: PodEntry) {
    incremental.apply(Delta::Pod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        pod: Some(pod),
    });
    black_box(incremental.ruleset());
}

fn changes(c: &mut Criterion) {
    let cluster = of_this_run();
    let mut incremental = built(cluster);
    // Pod 10 is on node-10 (remote), in ns-10 (team t0): as app-1 it is a
    // peer of policy 0 (ingress from app-1 in team t0's Namespaces), as
    // app-3 of no rule here; every 50th policy takes all Pods, so its
    // address is in that set. Pod `nodes` is local (`app-1`).
    let remote = 10;
    let local_pod = cluster.nodes;
    let mut group = c.benchmark_group("incremental");
    group.sample_size(20);
    group.bench_function("remote-status", |b| {
        b.iter(|| apply(&mut incremental, pod(cluster, remote, 1, 0)))
    });
    let mut flip = 0u8;
    group.bench_function("remote-address", |b| {
        b.iter(|| {
            flip ^= 1;
            apply(&mut incremental, pod(cluster, remote, 1, flip))
        })
    });
    apply(&mut incremental, pod(cluster, remote, 1, 0));
    let mut app = 1;
    group.bench_function("remote-label", |b| {
        b.iter(|| {
            app = if app == 1 { 3 } else { 1 };
            apply(&mut incremental, pod(cluster, remote, app, 0))
        })
    });
    apply(&mut incremental, pod(cluster, remote, 1, 0));
    let mut app = local_pod % 100;
    group.bench_function("local-label", |b| {
        b.iter(|| {
            app = if app == local_pod % 100 {
                7
            } else {
                local_pod % 100
            };
            apply(&mut incremental, pod(cluster, local_pod, app, 0))
        })
    });
    for (name, sides) in [
        ("namespace-label", [(None, false), (Some(1), false)]),
        ("policy-edit", [(None, false), (None, true)]),
    ] {
        // The second side shares every object the change left alone with
        // the first, as a Kubernetes source's snapshots do.
        let [first, second] = sides.map(|(renamed, edited)| {
            policy_side(&Snapshot {
                objects: parse(&policy_side_yaml(cluster, true, renamed, edited)),
            })
        });
        let sides = [first.clone(), sharing(&first, second.objects)];
        let mut which = 0;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    which ^= 1;
                    sides[which].clone()
                },
                |side| {
                    incremental.set_policies(side);
                    black_box(incremental.ruleset())
                },
                BatchSize::LargeInput,
            )
        });
        incremental.set_policies(sides[0].clone());
    }
    // An admission's validation of the policy side after one policy edit
    // (the snapshots share every other object, as a Kubernetes source's
    // do): checked whole, and by a checker that keeps what it found.
    let side = Snapshot {
        objects: parse(&policy_side_yaml(cluster, true, None, false)),
    };
    let edited = sharing(&side, parse(&policy_side_yaml(cluster, true, None, true)));
    let sides = [side, edited];
    let mut which = 0;
    group.bench_function("validate-whole", |b| {
        b.iter(|| {
            which ^= 1;
            black_box(check(&sides[which]))
        })
    });
    let mut checker = Checker::new(false);
    group.bench_function("validate-kept", |b| {
        b.iter(|| {
            which ^= 1;
            black_box(checker.check(&sides[which]))
        })
    });
    group.finish();
    // The baseline: the same inventory compiled whole, as one snapshot.
    let mut snapshot = Snapshot {
        objects: parse(&policy_side_yaml(cluster, true, None, false)),
    };
    // In chunks: the decoder takes at most 10,000 documents at once.
    for chunk in (0..cluster.pods).collect::<Vec<_>>().chunks(5_000) {
        let yaml: String = chunk.iter().map(|&i| pod_yaml(cluster, i)).collect();
        snapshot.objects.extend(parse(&yaml));
    }
    let node = local();
    let mut group = c.benchmark_group("incremental");
    group.sample_size(10);
    group.bench_function("full-compile", |b| {
        b.iter(|| black_box(compile(&snapshot, &node)))
    });
    // The agent's path: its source hands whole snapshots, each compared
    // member by member; the remote Pod's label flips between two.
    let mut relabelled = snapshot.clone();
    let at = relabelled.objects.len() - cluster.pods + remote;
    relabelled.objects[at] = parse(&pod_yaml_with(cluster, remote, 3)).remove(0);
    let snapshots = [Arc::new(snapshot), Arc::new(relabelled)];
    let mut incremental = Incremental::new(&snapshots[0], &node);
    incremental.ruleset();
    let mut which = 0;
    group.bench_function("snapshot-remote-label", |b| {
        b.iter(|| {
            which ^= 1;
            incremental.update(&snapshots[which], &node);
            black_box(incremental.ruleset())
        })
    });
    group.finish();
}

/// Pod `i` as its object, as [`pod`] describes it (`app-<i % 100>`).
fn pod_yaml(cluster: &Cluster, i: usize) -> String {
    pod_yaml_with(cluster, i, app_of(cluster, i))
}

/// Pod `i` as its object, labelled `app-<app>`.
fn pod_yaml_with(cluster: &Cluster, i: usize, app: usize) -> String {
    let entry = pod(cluster, i, app, 0);
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: {}\n  labels: {{app: {}, tier: {}}}\nspec:\n  nodeName: {}\nstatus:\n  podIP: {}\n---\n",
        entry.name,
        entry.namespace,
        entry.labels.get("app").unwrap(),
        entry.labels.get("tier").unwrap(),
        entry.node_name.as_deref().unwrap_or_default(),
        entry.ips[0]
    )
}

criterion_group!(benches, changes);
criterion_main!(benches);

/// `next` (the same objects as `base`, in the same order, some changed)
/// holding `base`'s own object wherever the two are equal.
fn sharing(base: &Snapshot, next: Vec<Sourced>) -> Snapshot {
    let objects = next
        .into_iter()
        .zip(&base.objects)
        .map(|(object, held)| {
            if object == *held {
                held.clone()
            } else {
                object
            }
        })
        .collect();
    Snapshot { objects }
}
