//! End-to-end cost of FQDN learning on the wire (root only): DNS query →
//! reply round trips from a node namespace to a responder in a server
//! namespace, first without a firewall, then with `tollgate run` enforcing
//! an FQDN egress policy on the node, in the same run. Every answer gives a
//! new address for a name the selector matches, so every reply is queued,
//! parsed, learned and written to the kernel set (the worst case: no
//! refresh short-cut). The client keeps one socket, so only the reply path
//! is measured (its query connection is decided once, by the first query).
//!
//! `cargo bench --bench fqdn_latency` (prints p50/p90/p99 and the added
//! latency; `FQDN_BENCH_QUERIES` sets the count, default 20000); `cargo
//! test --bench fqdn_latency` is a smoke run of 200 queries.
#![allow(unsafe_code)] // the bench enters a namespace (setns) and checks its uid.
#![allow(clippy::disallowed_methods)] // benches run programs and read the clock.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};

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

/// Round-trip times of `count` queries from one socket in `node`.
fn measure(node: &Ns, count: usize) -> Vec<Duration> {
    std::thread::scope(|s| {
        s.spawn(|| {
            node.enter();
            let socket = UdpSocket::bind("10.62.0.1:0").expect("client socket");
            socket.connect("10.62.0.2:53").expect("connect");
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let mut buf = [0u8; 512];
            let mut times = Vec::with_capacity(count);
            for i in 0..count {
                let name = Name::from_ascii(format!("n{i}.bench.test.")).expect("name");
                let mut query =
                    Message::new((i & 0xffff) as u16, MessageType::Query, OpCode::Query);
                query.add_query(Query::query(name, RecordType::A));
                let bytes = query.to_vec().expect("query");
                let start = Instant::now();
                socket.send(&bytes).expect("send");
                socket.recv(&mut buf).expect("reply within 2 s");
                times.push(start.elapsed());
            }
            times
        })
        .join()
        .expect("client thread")
    })
}

fn percentiles(mut times: Vec<Duration>) -> [Duration; 3] {
    times.sort();
    let at = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    [at(0.50), at(0.90), at(0.99)]
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
    // (CI's smoke run) does not: then a few queries only, the whole path
    // all the same.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let count: usize = match smoke {
        true => 200,
        false => std::env::var("FQDN_BENCH_QUERIES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000),
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
    // Warm up neighbours and caches.
    measure(&node, 200);

    let baseline = percentiles(measure(&node, count));

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bench.yaml"), POLICY).expect("policy");
    let mut agent: Child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &node.0,
            env!("CARGO_BIN_EXE_tollgate"),
            "run",
        ])
        .args(["--policies", dir.path().to_str().expect("utf-8 path")])
        .args(["--node-name", "bench", "--queues", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tollgate run");
    let stderr = agent.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.expect("agent log");
        if line.contains("ruleset applied") {
            break;
        }
    }
    measure(&node, 200);
    let firewalled = percentiles(measure(&node, count));
    let _ = Command::new("kill")
        .args(["-TERM", &agent.id().to_string()])
        .status();
    let stats: Vec<String> = lines
        .map_while(Result::ok)
        .filter(|l| l.contains("dns stats"))
        .collect();
    let _ = agent.wait();

    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("fqdn_latency: {count} queries per phase, one reply = one new set entry");
    for (label, [p50, p90, p99]) in [("no firewall", baseline), ("tollgate", firewalled)] {
        println!(
            "  {label:<12} p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs",
            us(p50),
            us(p90),
            us(p99)
        );
    }
    println!(
        "  added        p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs",
        us(firewalled[0]) - us(baseline[0]),
        us(firewalled[1]) - us(baseline[1]),
        us(firewalled[2]) - us(baseline[2])
    );
    for line in stats {
        println!("  {line}");
    }
}
