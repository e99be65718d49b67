//! The change review at scale (issue 31's target: < 5 s and < 1 GiB):
//! 500 Namespaces of 20 Pods (10,000 Pods, labelled `app=app-<i % 10>`,
//! their Namespaces `team=t<ns % 5>`), 1,000 Antrea NetworkPolicies, two
//! per Namespace: policy k applies to `app-<k % 10>`, allows TCP port
//! `1000 + k % 50` from `app-<(k + 1) % 10>` of the Namespace and from the
//! Namespaces of one team, and drops one ipBlock; and one cluster-wide
//! ClusterNetworkPolicy applied to every Pod, dropping 172.16.0.0/24. Two
//! changes, measured apart: `namespaced`, policy 0 drops 192.168.0.0/23
//! instead of 192.168.0.0/24 (its 20 Pods no longer take anything from
//! 192.168.1.0/24); `cluster-wide`, the ClusterNetworkPolicy drops
//! 172.16.0.0/23 (every Pod's ingress changes).
//!
//! `cargo bench -p tollgate-core --bench review_scale` prints the time to
//! compile both sides, the time of the diff, the number of rows, and the
//! peak heap above what the snapshots hold. One run, no statistics: it is
//! a ceiling check, not a microbenchmark.
#![allow(unsafe_code)] // a counting global allocator measures the peak heap.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use tollgate_core::compile::LocalNode;
use tollgate_core::model::{Object, Snapshot, Sourced};
use tollgate_core::review::{diff, Side};

/// Counts live heap bytes and their peak.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now =
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed) + layout.size() as isize;
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NAMESPACES: usize = 500;
const PODS: usize = 10_000;
const POLICIES: usize = 1_000;

fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        1 + (i / 65536) as u8,
        ((i / 256) % 256) as u8,
        (i % 256) as u8,
    )
}

/// Which policy the change is made to.
#[derive(Clone, Copy, PartialEq)]
enum Change {
    Namespaced,
    ClusterWide,
}

fn snapshot(change: Option<Change>) -> Snapshot {
    let mut docs: Vec<String> = Vec::new();
    for ns in 0..NAMESPACES {
        docs.push(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{ns}, labels: {{team: t{}}}}}\n",
            ns % 5
        ));
    }
    for i in 0..PODS {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: ns-{}, labels: {{app: app-{}}}}}\nstatus: {{podIP: {}}}\n",
            i % NAMESPACES,
            i % 10,
            pod_ip(i)
        ));
    }
    for k in 0..POLICIES {
        let port = 1000 + k % 50;
        let prefix = if change == Some(Change::Namespaced) && k == 0 {
            23
        } else {
            24
        };
        docs.push(format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {{name: pol-{k}, namespace: ns-{}}}\nspec:\n  priority: {}\n  tier: {}\n  appliedTo: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]\n  ingress:\n  - action: Allow\n    from:\n    - podSelector: {{matchLabels: {{app: app-{}}}}}\n    - namespaceSelector: {{matchLabels: {{team: t{}}}}}\n    ports: [{{protocol: TCP, port: {port}}}]\n  - action: Drop\n    from: [{{ipBlock: {{cidr: 192.168.{}.0/{prefix}}}}}]\n",
            k % NAMESPACES,
            1 + k % 100,
            ["securityops", "application"][k % 2],
            k % 10,
            (k + 1) % 10,
            k % 5,
            k % 256
        ));
    }
    let prefix = if change == Some(Change::ClusterWide) {
        23
    } else {
        24
    };
    docs.push(format!(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: wide}}\nspec:\n  priority: 1\n  tier: securityops\n  appliedTo: [{{podSelector: {{}}}}]\n  ingress:\n  - action: Drop\n    from: [{{ipBlock: {{cidr: 172.16.0.0/{prefix}}}}}]\n"
    ));
    Snapshot {
        objects: docs
            .iter()
            .map(|doc| {
                Sourced::new(
                    std::path::Path::new("bench.yaml"),
                    Object::from_value(serde_saphyr::from_str(doc).expect("yaml")).expect("decode"),
                )
            })
            .collect(),
    }
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench` absent:
    // build only.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let local = LocalNode {
        name: "node".into(),
        ..LocalNode::default()
    };
    let before = snapshot(None);
    for (name, change) in [
        ("namespaced", Change::Namespaced),
        ("cluster-wide", Change::ClusterWide),
    ] {
        let after = snapshot(Some(change));
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let (old, new) = (
            Side::compile(&before, &local),
            Side::compile(&after, &local),
        );
        let compiled = started.elapsed();
        let started = Instant::now();
        let report = diff(&old, &new, false);
        let diffed = started.elapsed();
        let peak = PEAK.load(Ordering::Relaxed) - base;
        println!(
            "review_scale/{name}: {PODS} Pods, {NAMESPACES} Namespaces, {POLICIES} policies, one changed: compile both sides {:.2} s, diff {:.2} s, {} rows ({} opened, {} closed), peak heap {:.0} MiB",
            compiled.as_secs_f64(),
            diffed.as_secs_f64(),
            report.changes.len(),
            report.summary.opened,
            report.summary.closed,
            peak as f64 / (1024.0 * 1024.0)
        );
    }
}
