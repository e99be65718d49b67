//! Classification throughput and compile cost of the pure core.
//!
//! Synthetic cluster: 1,000 enforced Pods (10,000 for the compile bench) in
//! 20 Namespaces, labelled `app=app-<i % 100>`; N policies spread over them:
//! policy k applies to `app-<k % 100>`, allows TCP port `1000 + k % 500`
//! from `app-<(k + 1) % 100>` and another Namespace, and drops one ipBlock.
//! Flows are pseudo-random Pod-to-Pod TCP connections, half of them to a
//! port some rule names. `classify-same-port` is the end-to-end bench's
//! shape instead: N rules on TCP 80 from N different /32s, one flow
//! repeated; `classify-same-port-new-sources` the same rules with every flow
//! from another source (the end-to-end all-miss scenario);
//! `classify-dry-run` the `classify` shape with every other policy in
//! dry-run. Rule counts: 10, 100, 1,000 and 10,000 (`classify`,
//! `classify-dry-run`), 10, 1,000 and 10,000 (the others).
//!
//! `cargo bench --bench classify` prints, per rule count, the time of one
//! classification; the compile group prints compile time and the ruleset's
//! live heap size.
#![allow(unsafe_code)] // a counting global allocator measures the ruleset's memory.
#![allow(clippy::disallowed_methods)] // benches read the clock.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tollgate_core::compile::LocalNode;
use tollgate_core::fqdn::NoFqdn;
use tollgate_core::model::{Object, Snapshot, Sourced};
use tollgate_core::packet::flow::{Flow, Transport};

/// Counts live heap bytes, to report the compiled ruleset's memory.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn pod_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        10,
        1 + (i / 65536) as u8,
        ((i / 256) % 256) as u8,
        (i % 256) as u8,
    )
}

fn synthetic(pods: usize, policies: usize) -> Snapshot {
    synthetic_with(pods, policies, false)
}

/// [`synthetic`], with every other policy (odd `k`) in dry-run when
/// `dry_run`.
fn synthetic_with(pods: usize, policies: usize, dry_run: bool) -> Snapshot {
    let mut docs: Vec<String> = Vec::new();
    for ns in 0..20 {
        docs.push(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{ns}, labels: {{team: t{}}}}}\n",
            ns % 5
        ));
    }
    for i in 0..pods {
        docs.push(format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: ns-{}, labels: {{app: app-{}}}}}\nstatus: {{podIP: {}}}\n",
            i % 20,
            i % 100,
            pod_ip(i)
        ));
    }
    for k in 0..policies {
        let annotations = if dry_run && k % 2 == 1 {
            ", annotations: {tollgate.io/dry-run: 'true'}"
        } else {
            ""
        };
        docs.push(format!(
            "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {{name: pol-{k}{annotations}}}\nspec:\n  priority: {}\n  tier: {}\n  appliedTo: [{{podSelector: {{matchLabels: {{app: app-{}}}}}}}]\n  ingress:\n  - action: Allow\n    from:\n    - podSelector: {{matchLabels: {{app: app-{}}}}}\n    - namespaceSelector: {{matchLabels: {{team: t{}}}}}\n    ports: [{{protocol: TCP, port: {}}}]\n  - action: Drop\n    from: [{{ipBlock: {{cidr: 192.168.{}.0/24}}}}]\n",
            1 + k % 1000,
            ["securityops", "application", "platform"][k % 3],
            k % 100,
            (k + 1) % 100,
            k % 5,
            1000 + k % 500,
            k % 256
        ));
    }
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

fn local() -> LocalNode {
    LocalNode {
        name: "node".into(),
        ..Default::default()
    }
}

/// Deterministic pseudo-random flows between the first `pods` Pods.
fn flows(pods: usize, count: usize) -> Vec<Flow> {
    let mut state: u64 = 0x9e3779b97f4a7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let src = (next() % pods as u64) as usize;
            let dst = (next() % pods as u64) as usize;
            let r = next();
            let dst_port = if r % 2 == 0 {
                1000 + (r / 2 % 500) as u16
            } else {
                (r / 2 % 65535) as u16 + 1
            };
            Flow {
                src: IpAddr::V4(pod_ip(src)),
                dst: IpAddr::V4(pod_ip(dst)),
                transport: Transport::Tcp {
                    src_port: 40000,
                    dst_port,
                },
                local: None,
            }
        })
        .collect()
}

fn classify(c: &mut Criterion) {
    classify_group(c, "classify", false);
    classify_group(c, "classify-dry-run", true);
}

/// The `classify` bench; `dry_run`: half of the policies in dry-run (every
/// flow to an endpoint they apply to decided twice: enforced and dry-run).
fn classify_group(c: &mut Criterion, name: &str, dry_run: bool) {
    let mut group = c.benchmark_group(name);
    let flows = flows(1000, 4096);
    for &rules in sizes(&[10, 100, 1000, 10_000]) {
        // Each policy has two rules.
        let snapshot = synthetic_with(1000, rules / 2, dry_run);
        let ruleset = tollgate_core::compile::compile(&snapshot, &local());
        group.throughput(Throughput::Elements(flows.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(rules), &ruleset, |b, rs| {
            b.iter(|| {
                let mut allowed = 0usize;
                for flow in &flows {
                    if rs.classify(black_box(flow), &NoFqdn).verdict
                        == tollgate_core::packet::flow::Verdict::Allow
                    {
                        allowed += 1;
                    }
                }
                allowed
            })
        });
    }
    group.finish();
}

/// One Pod, N rules on TCP 80 each dropping one /32 (the shape of the
/// end-to-end benchmark): every rule shares the port, none the peer.
fn same_port(rules: usize) -> Snapshot {
    let mut docs = vec![
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default, labels: {app: web}}\nstatus: {podIP: 10.0.0.1}\n".to_string(),
    ];
    let mut policy = String::from(
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: many}\nspec:\n  priority: 1\n  appliedTo: [{podSelector: {matchLabels: {app: web}}}]\n  ingress:\n",
    );
    for i in 0..rules {
        policy.push_str(&format!(
            "  - {{name: r{i}, action: Drop, from: [{{ipBlock: {{cidr: 172.16.{}.{}/32}}}}], ports: [{{protocol: TCP, port: 80}}]}}\n",
            i / 250,
            i % 250 + 1
        ));
    }
    docs.push(policy);
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

fn classify_same_port(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify-same-port");
    let flow = Flow {
        src: IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        transport: Transport::Tcp {
            src_port: 40000,
            dst_port: 80,
        },
        local: None,
    };
    for &rules in sizes(&[10, 1000, 10_000]) {
        let ruleset = tollgate_core::compile::compile(&same_port(rules), &local());
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(BenchmarkId::from_parameter(rules), &ruleset, |b, rs| {
            b.iter(|| rs.classify(black_box(&flow), &NoFqdn).verdict)
        });
    }
    group.finish();
}

/// The same-port shape with every flow from a new source address (the
/// end-to-end bench's all-miss scenario): 4,096 sources of 100.64.0.0/10
/// per iteration, so no lookup is served by a repeated address.
fn classify_same_port_new_sources(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify-same-port-new-sources");
    let flows: Vec<Flow> = (0..4096u32)
        .map(|i| Flow {
            src: IpAddr::V4(Ipv4Addr::from(
                u32::from(Ipv4Addr::new(100, 64, 0, 1)) + i * 977,
            )),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            transport: Transport::Tcp {
                src_port: 40000,
                dst_port: 80,
            },
            local: None,
        })
        .collect();
    for &rules in sizes(&[10, 1000, 10_000]) {
        let ruleset = tollgate_core::compile::compile(&same_port(rules), &local());
        group.throughput(Throughput::Elements(flows.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(rules), &ruleset, |b, rs| {
            b.iter(|| {
                flows
                    .iter()
                    .filter(|flow| {
                        rs.classify(black_box(flow), &NoFqdn).verdict
                            == tollgate_core::packet::flow::Verdict::Allow
                    })
                    .count()
            })
        });
    }
    group.finish();
}

fn compile(c: &mut Criterion) {
    let (pods, policies, shape) = match smoke() {
        true => (100, 50, "100 rules x 100 Pods"),
        false => (10_000, 5_000, "10,000 rules x 10,000 Pods"),
    };
    let snapshot = synthetic(pods, policies);
    let before = LIVE.load(Ordering::Relaxed);
    let started = Instant::now();
    let ruleset = tollgate_core::compile::compile(&snapshot, &local());
    let elapsed = started.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "compile: {shape}: {:?} once, ruleset live heap {:.1} MiB ({} rule instances, {} endpoints)",
        elapsed,
        bytes as f64 / (1024.0 * 1024.0),
        ruleset.rule_count(),
        ruleset.endpoints().len()
    );
    drop(ruleset);
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.bench_function(format!("{}-rules-{pods}-pods", policies * 2), |b| {
        b.iter(|| tollgate_core::compile::compile(black_box(&snapshot), &local()))
    });
    group.finish();
}

/// Whether this is `cargo test --bench classify` (CI's smoke run: no
/// `--bench` argument, each benchmark run once) rather than `cargo bench`.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// `full`, or only its smallest size in a smoke run (the large rulesets'
/// setup takes minutes in a debug build).
fn sizes(full: &'static [usize]) -> &'static [usize] {
    match smoke() {
        true => &full[..1],
        false => full,
    }
}

criterion_group!(
    benches,
    classify,
    classify_same_port,
    classify_same_port_new_sources,
    compile
);
criterion_main!(benches);
