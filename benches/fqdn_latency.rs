//! End-to-end cost of FQDN learning on the wire (root only): DNS query →
//! reply round trips from a node namespace to a responder in a server
//! namespace, in four configurations measured in interleaved rounds:
//! - `none`: no firewall;
//! - `conntrack`: connection tracking only (one ESTABLISHED accept);
//! - `queue`: conntrack, and every reply through an NFQUEUE whose worker
//!   (tollgate's own queue runtime and socket) accepts it at once: the
//!   floor of any design that holds a reply in userspace until it is
//!   learned;
//! - `tollgate`: `tollgate run` enforcing an FQDN egress policy on the node.
//!
//! Every answer gives a new address for a name the selector matches, so
//! every reply tollgate holds is parsed, learned and written to the kernel
//! set before it is released (the worst case: no refresh short-cut). The
//! client keeps one socket, so only the reply path is measured (its query
//! connection is decided once, by the first query).
//!
//! `cargo bench --bench fqdn_latency` (`FQDN_BENCH_QUERIES` queries per
//! measurement, default 20000; `FQDN_BENCH_ROUNDS` rounds, default 5, each
//! measuring every configuration once, starting one later each round)
//! prints each configuration's medians over the rounds of p50/p90/p99,
//! and tollgate's added latency against each baseline (the medians of the
//! per-round differences); `cargo test --bench fqdn_latency` is a smoke run
//! of one round of 200 queries.
#![allow(unsafe_code)] // the bench enters a namespace (setns) and checks its uid.
#![allow(clippy::disallowed_methods)] // benches run programs and read the clock.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tollgate::packet::{Action, Queued};
use tollgate::telemetry::Metrics;
use tollgate::workers::runtime::{self, Handler, QueueCounters, QueueSpec, Verdicts};
use tollgate::workers::Queue;

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: bench}
spec:
  priority: 5
  appliedTo: [{nodeSelector: {}}]
  egress:
  - action: Allow
    to: [{ipBlock: {cidr: 10.62.0.0/24}}]
    ports: [{protocol: UDP, port: 53}]
  - action: Allow
    to: [{fqdn: '*.bench.test'}]
  - action: Drop
    to: [{ipBlock: {cidr: 0.0.0.0/0}}]
";

struct Ns(String);

impl Ns {
    fn new(tag: &str) -> Ns {
        let name = format!("tg-fqbench-{tag}-{}", std::process::id());
        sh(&format!("ip netns add {name}"));
        Ns(name)
    }

    fn exec(&self, script: &str) {
        sh(&format!("ip netns exec {} sh -c '{script}'", self.0));
    }

    fn enter(&self) {
        let file = File::open(format!("/run/netns/{}", self.0)).expect("netns file");
        // SAFETY: setns on a valid namespace fd affects only this thread.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns");
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn sh(script: &str) {
    let status = Command::new("sh")
        .args(["-c", script])
        .status()
        .expect("sh");
    assert!(status.success(), "{script}");
}

/// Answers every query for `*.bench.test` with a fresh address.
fn responder(server: &Ns) {
    let socket = std::thread::scope(|s| {
        s.spawn(|| {
            server.enter();
            UdpSocket::bind("10.62.0.2:53").expect("bind responder")
        })
        .join()
        .expect("responder thread")
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        let mut counter: u32 = 0;
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let Some(q) = query.queries.first() else {
                continue;
            };
            counter = counter.wrapping_add(1);
            let address = Ipv4Addr::from(0x0a40_0000 | (counter & 0x003f_ffff));
            let mut reply = Message::new(query.metadata.id, MessageType::Response, OpCode::Query);
            reply.add_query(q.clone());
            reply.add_answer(Record::from_rdata(
                q.name.clone(),
                300,
                RData::A(A(address)),
            ));
            if let Ok(bytes) = reply.to_vec() {
                let _ = socket.send_to(&bytes, peer);
            }
        }
    });
}

/// Round-trip times of `count` queries from one socket in `node`, and how
/// many were not answered within a second (not timed; a late reply is
/// told from the next one's by its id).
fn measure(node: &Ns, count: usize) -> (Vec<Duration>, usize) {
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            let socket = UdpSocket::bind("10.62.0.1:0").expect("client socket");
            socket.connect("10.62.0.2:53").expect("connect");
            socket
                .set_read_timeout(Some(Duration::from_secs(1)))
                .expect("timeout");
            let mut buf = [0u8; 512];
            let mut times = Vec::with_capacity(count);
            let mut lost = 0;
            for i in 0..count {
                let id = (i & 0xffff) as u16;
                let name = Name::from_ascii(format!("n{i}.bench.test.")).expect("name");
                let mut query = Message::new(id, MessageType::Query, OpCode::Query);
                query.add_query(Query::query(name, RecordType::A));
                let bytes = query.to_vec().expect("query");
                let start = Instant::now();
                socket.send(&bytes).expect("send");
                loop {
                    match socket.recv(&mut buf) {
                        Ok(n) if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id => {
                            times.push(start.elapsed());
                            break;
                        }
                        Ok(_) => continue,
                        Err(_) => {
                            lost += 1;
                            break;
                        }
                    }
                }
            }
            (times, lost)
        })
        .join()
        .expect("client thread")
    })
}

/// The `queue` configuration's queue: far from tollgate's (100 and up).
const FLOOR_QUEUE: u16 = 150;

/// The `queue` configuration's worker: every packet accepted at once.
struct AcceptAll;

impl Handler for AcceptAll {
    fn packet(&mut self, packet: Queued<'_>, _now: Instant, out: &mut Verdicts) {
        out.give(packet.id, Action::Accept);
    }
}

/// Binds [`FLOOR_QUEUE`] in `node` and starts its worker, which runs until
/// the bench exits (no packet reaches it outside the `queue`
/// configuration).
fn floor_worker(node: &Ns, metrics: &Metrics) {
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            let spec = QueueSpec {
                queue: FLOOR_QUEUE,
                name: "floor",
                copy_range: u16::MAX,
                max_len: 4096,
                fail_open: false,
                gso: false,
                receive_buffer: 0,
            };
            // The worker thread is started from this one, in `node`.
            runtime::spawn(
                move || Ok((Queue::open(spec)?, AcceptAll)),
                Arc::new(QueueCounters::default()),
                metrics,
            )
            .expect("bind the floor queue");
        })
        .join()
        .expect("floor worker thread")
    });
}

/// The configurations, in the order of the first round.
const CONFIGS: [&str; 4] = ["none", "conntrack", "queue", "tollgate"];

/// A running `tollgate run` on `node` with [`POLICY`], once its first
/// ruleset is applied.
struct Agent {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStderr>>,
}

impl Agent {
    fn start(node: &Ns, policies: &std::path::Path) -> Agent {
        let mut child: Child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &node.0,
                env!("CARGO_BIN_EXE_tollgate"),
                "run",
            ])
            .args(["--policies", policies.to_str().expect("utf-8 path")])
            .args(["--node-name", "bench", "--queues", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tollgate run");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        for line in lines.by_ref() {
            if line.expect("agent log").contains("ruleset applied") {
                break;
            }
        }
        Agent { child, lines }
    }

    /// Stops the agent and removes what it leaves in the kernel (its
    /// rules outlive it by design: `tollgate cleanup`).
    fn stop(mut self, node: &Ns) -> Vec<String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let stats = self
            .lines
            .map_while(Result::ok)
            .filter(|l| l.contains("dns stats"))
            .collect();
        let _ = self.child.wait();
        let cleaned = Command::new("ip")
            .args([
                "netns",
                "exec",
                &node.0,
                env!("CARGO_BIN_EXE_tollgate"),
                "cleanup",
            ])
            .stdout(Stdio::null())
            .status()
            .expect("tollgate cleanup");
        assert!(cleaned.success(), "tollgate cleanup");
        stats
    }
}

fn percentiles(mut times: Vec<Duration>) -> [f64; 3] {
    times.sort();
    let at = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    [at(0.50), at(0.90), at(0.99)].map(|d| d.as_secs_f64() * 1e6)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("fqdn_latency: skipped, needs root");
        return;
    }
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --bench fqdn_latency`
    // (CI's smoke run) does not: then one round of a few queries, the
    // whole path all the same.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let setting = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (count, rounds) = match smoke {
        true => (200, 1),
        false => (
            setting("FQDN_BENCH_QUERIES", 20_000),
            setting("FQDN_BENCH_ROUNDS", 5).max(1),
        ),
    };
    let node = Ns::new("n");
    let server = Ns::new("s");
    sh(&format!(
        "ip link add ve netns {n} type veth peer name ve netns {s}",
        n = node.0,
        s = server.0
    ));
    node.exec("ip link set lo up && ip addr add 10.62.0.1/24 dev ve && ip link set ve up");
    server.exec("ip link set lo up && ip addr add 10.62.0.2/24 dev ve && ip link set ve up");
    responder(&server);
    let metrics = Metrics::new();
    floor_worker(&node, &metrics);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.yaml"), POLICY).expect("policy");
    const CONNTRACK: &str =
        "iptables -w -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT";

    // results[config][round] = [p50, p90, p99]
    let mut results = vec![Vec::new(); CONFIGS.len()];
    let mut lost_by = [0; CONFIGS.len()];
    let mut stats = Vec::new();
    for round in 0..rounds {
        for k in 0..CONFIGS.len() {
            let config = (round + k) % CONFIGS.len();
            let agent = match CONFIGS[config] {
                "conntrack" => {
                    node.exec(CONNTRACK);
                    None
                }
                "queue" => {
                    node.exec(&format!(
                        "iptables -w -A INPUT -p udp --sport 53 -j NFQUEUE --queue-num {FLOOR_QUEUE} && {CONNTRACK}"
                    ));
                    None
                }
                "tollgate" => Some(Agent::start(&node, dir.path())),
                _ => None,
            };
            // Warm up neighbours, caches and the worker.
            measure(&node, 200);
            let (times, lost) = measure(&node, count);
            results[config].push(percentiles(times));
            lost_by[config] += lost;
            match agent {
                Some(agent) => stats.extend(agent.stop(&node)),
                None => node.exec("iptables -w -F INPUT"),
            }
        }
    }

    println!(
        "fqdn_latency: {count} queries per measurement, {rounds} interleaved rounds, \
         medians; tollgate: one reply = one new set entry"
    );
    let column = |config: usize, i: usize| median(results[config].iter().map(|r| r[i]).collect());
    for (config, name) in CONFIGS.iter().enumerate() {
        println!(
            "  {name:<10} p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs  lost {}",
            column(config, 0),
            column(config, 1),
            column(config, 2),
            lost_by[config]
        );
    }
    // Added latency: the median over rounds of (config − baseline).
    let added = |config: usize, base: usize, i: usize| {
        median(
            results[config]
                .iter()
                .zip(&results[base])
                .map(|(c, b)| c[i] - b[i])
                .collect(),
        )
    };
    for (label, config, base) in [
        ("tollgate − none", 3, 0),
        ("tollgate − conntrack", 3, 1),
        ("queue − conntrack", 2, 1),
        ("tollgate − queue", 3, 2),
    ] {
        println!(
            "  {label:<21} p50 {:>+7.1} µs  p90 {:>+7.1} µs  p99 {:>+7.1} µs",
            added(config, base, 0),
            added(config, base, 1),
            added(config, base, 2)
        );
    }
    for line in stats {
        println!("  {line}");
    }
}
