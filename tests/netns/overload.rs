//! Overload on the wire: a SYN flood at a policy-denied port with a real
//! listener while the agent's worker is stopped, in fail-closed (not one
//! denied SYN passes the filter table) and fail-open (the documented bypass
//! while overrun); and denied L7 requests while the L7 worker is overrun.
//!
//! The worker is stopped (SIGSTOP) mid-flood so it is overrun for certain
//! (its netlink socket buffer fills first, then the kernel queue). A
//! counter in the nat INPUT hook, which runs after filter, counts what got
//! past the firewall; allowed connections are served during and after the
//! flood, and the overflow shows in the kernel's and the agent's counters.
//! L7: denied HTTP requests sent all at once on hundreds of established
//! connections never reach the server. Bounded: a few seconds of flood at
//! ~10,000 SYN/s, no timed assertions on speed (`benches/overload.sh`
//! measures).

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::harness::{
    poll_until, Agent, FailMode, Lab, Service, TcpOutcome, ALLOW_WAIT, DENY_WAIT,
};

const ALLOWED: u16 = 8080;
const DENIED: u16 = 9090;
const METRICS_PORT: u16 = 9475;
/// SYNs per millisecond the flooder sends.
const FLOOD_PER_MS: u32 = 10;
/// Upper bound of one flood; the tests stop it earlier.
const FLOOD_MAX: Duration = Duration::from_secs(20);
/// Packets the kernel holds per queue (`queue::worker::QUEUE_MAX_LEN`).
const QUEUE_MAX_LEN: u64 = 4096;

/// The node policy; `l7` is appended to the allow rule (an `l7Protocols`
/// key, or nothing).
fn l7_policy(client_subnet: &str, l7: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: overload
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: allow-web
      action: Allow
      from:
        - ipBlock:
            cidr: {client_subnet}
      ports:
        - protocol: TCP
          port: {ALLOWED}
{l7}    - name: drop-rest
      action: Drop
"
    )
}

/// A listener on the denied port that counts the connections it accepts.
struct CountingListener {
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CountingListener {
    fn start(lab: &Lab, port: u16) -> CountingListener {
        let listener = lab
            .node()
            .enter(move || TcpListener::bind(("0.0.0.0", port)))
            .expect("bind the denied port");
        listener.set_nonblocking(true).expect("nonblocking");
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, flag) = (Arc::clone(&accepted), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok(_) => {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        CountingListener {
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for CountingListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Raw TCP SYNs from the client namespace, each from a new source port, at
/// [`FLOOD_PER_MS`] per millisecond until stopped (or [`FLOOD_MAX`]).
struct SynFlood {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl SynFlood {
    fn start(lab: &Lab, role: &str, to: SocketAddrV4) -> SynFlood {
        let from = lab.addr(role);
        let socket = lab.ns(role).enter(|| {
            // SAFETY: plain socket(2); the descriptor is owned right away.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
            assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
            // SAFETY: fd is a fresh descriptor nobody else owns.
            unsafe { OwnedFd::from_raw_fd(fd) }
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || send_syns(&socket, from, to, &flag));
        SynFlood {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the flood; returns how many SYNs the kernel took.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("flooder thread"))
            .unwrap_or(0)
    }
}

impl Drop for SynFlood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn send_syns(socket: &OwnedFd, from: Ipv4Addr, to: SocketAddrV4, stop: &AtomicBool) -> u64 {
    let destination = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(*to.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let deadline = Instant::now() + FLOOD_MAX;
    let mut sent = 0u64;
    let mut n = 0u32;
    let mut packet = Vec::with_capacity(64);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        for _ in 0..FLOOD_PER_MS {
            n = n.wrapping_add(1);
            let source_port = 1024 + (n % 60_000) as u16;
            packet.clear();
            etherparse::PacketBuilder::ipv4(from.octets(), to.ip().octets(), 64)
                .tcp(source_port, to.port(), n, 64_240)
                .syn()
                .write(&mut packet, &[])
                .expect("SYN fits a Vec");
            // SAFETY: packet and destination are valid for the call.
            let rc = unsafe {
                libc::sendto(
                    socket.as_raw_fd(),
                    packet.as_ptr().cast(),
                    packet.len(),
                    0,
                    std::ptr::from_ref(&destination).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if rc > 0 {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    sent
}

/// Adds a counting rule for new TCP connections to `port` to the nat INPUT
/// chain of the node: that hook runs after the filter table, so it counts
/// exactly the connections the firewall let through.
fn count_past_filter(lab: &Lab, port: u16) {
    let port = port.to_string();
    lab.node().run(&[
        "iptables", "-w", "-t", "nat", "-A", "INPUT", "-p", "tcp", "--dport", &port,
    ]);
}

fn past_filter(lab: &Lab, port: u16) -> u64 {
    let out = lab.node().run(&[
        "iptables", "-w", "-t", "nat", "-L", "INPUT", "-v", "-x", "-n",
    ]);
    let needle = format!("dpt:{port}");
    out.stdout
        .lines()
        .find(|l| l.contains(&needle))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counter rule for {port}: {}", out.stdout))
}

fn scrape(lab: &Lab) -> BTreeMap<String, f64> {
    let url = format!("http://127.0.0.1:{METRICS_PORT}/metrics");
    let out = lab.node().run(&["curl", "-sf", "--max-time", "5", &url]);
    out.stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn sum_metric(metrics: &BTreeMap<String, f64>, name: &str) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(_, v)| v)
        .sum()
}

struct Setup {
    lab: Lab,
    listener: CountingListener,
    agent: Agent,
    node: Ipv4Addr,
}

fn setup(test: &'static str, mode: FailMode, queues: Option<u16>) -> Option<Setup> {
    setup_with(test, mode, queues, Service::Echo, "")
}

fn setup_with(
    test: &'static str,
    mode: FailMode,
    queues: Option<u16>,
    service: Service,
    l7: &str,
) -> Option<Setup> {
    let lab = Lab::builder(test)
        .peer("client")
        .require(&["curl"])
        .build()?;
    lab.serve_tcp("node", ALLOWED, service);
    let listener = CountingListener::start(&lab, DENIED);
    count_past_filter(&lab, DENIED);
    lab.write_policy("overload.yaml", &l7_policy(&lab.subnet("client"), l7));
    // Without the verdict cache: the flood must reach the worker (with it,
    // a flood at one tuple stays in the kernel: `cache.rs`).
    let mut options = lab
        .agent_options()
        .fail_mode(mode)
        .args(&["--verdict-cache", "off"]);
    if let Some(n) = queues {
        options = options.queues(n);
    }
    options.extra_args.extend([
        "--metrics-address".to_string(),
        format!("127.0.0.1:{METRICS_PORT}"),
    ]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let node = lab.node_addr("client");
    lab.assert_tcp("client", (node, ALLOWED), TcpOutcome::Connected);
    lab.assert_tcp("client", (node, DENIED), TcpOutcome::TimedOut);
    Some(Setup {
        lab,
        listener,
        agent,
        node,
    })
}

/// Connects to the allowed port until one attempt succeeds (a SYN may be
/// lost in a full queue; TCP retransmits it, and we retry a few times).
fn allowed_connects(lab: &Lab, to: SocketAddr) -> bool {
    (0..5).any(|_| lab.tcp("client", to, ALLOW_WAIT) == TcpOutcome::Connected)
}

/// Packets the kernel dropped for the node's queues: queue full, or the
/// worker's socket buffer full.
fn kernel_drops(lab: &Lab) -> u64 {
    lab.queue_counters()
        .iter()
        .map(|c| c.queue_dropped + c.user_dropped)
        .sum()
}

/// Waits until every bound queue of the node is drained.
fn wait_drained(lab: &Lab) {
    poll_until(Duration::from_secs(30), || {
        lab.queue_counters()
            .iter()
            .all(|c| c.queue_total == 0)
            .then_some(())
    })
    .expect("the workers drain their queues after the flood");
}

#[test]
fn syn_flood_fail_closed_lets_no_denied_connection_through() {
    let Some(s) = setup(
        "syn_flood_fail_closed_lets_no_denied_connection_through",
        FailMode::Closed,
        None,
    ) else {
        return;
    };
    let (allowed, denied) = (
        SocketAddr::from((s.node, ALLOWED)),
        SocketAddrV4::new(s.node, DENIED),
    );
    let flood = SynFlood::start(&s.lab, "client", denied);

    // Under the flood: allowed connections are served, denied ones are not.
    assert!(
        allowed_connects(&s.lab, allowed),
        "an allowed connection is served during the flood"
    );
    for _ in 0..3 {
        assert_ne!(
            s.lab.tcp("client", denied, DENY_WAIT),
            TcpOutcome::Connected,
            "a denied connection got through during the flood"
        );
    }

    // The worker stalls: its socket buffer and queue fill up and overflow;
    // still nothing denied may pass (nor, in fail-closed, anything new).
    s.agent.signal(libc::SIGSTOP);
    let overflowed = poll_until(Duration::from_secs(20), || {
        (kernel_drops(&s.lab) > 0).then_some(())
    });
    let during_stall = s.lab.tcp("client", denied, DENY_WAIT);
    s.agent.signal(libc::SIGCONT);
    assert!(overflowed.is_some(), "the stalled queue never overflowed");
    assert_ne!(during_stall, TcpOutcome::Connected, "denied while stalled");

    assert!(
        allowed_connects(&s.lab, allowed),
        "an allowed connection is served again once the worker runs"
    );
    let sent = flood.finish();
    wait_drained(&s.lab);

    // After the flood: served again, still denied, no stuck worker.
    s.lab.assert_tcp("client", allowed, TcpOutcome::Connected);
    s.lab.assert_tcp("client", denied, TcpOutcome::TimedOut);
    assert!(sent > QUEUE_MAX_LEN, "the flood sent only {sent} SYNs");
    assert_eq!(
        past_filter(&s.lab, DENIED),
        0,
        "denied SYNs got past the filter table"
    );
    assert_eq!(
        s.listener.accepted(),
        0,
        "the denied listener accepted connections"
    );

    let kernel = s.lab.queue_counters();
    let metrics = scrape(&s.lab);
    assert_eq!(
        (sum_metric(&metrics, "tollgate_queue_kernel_dropped_total")
            + sum_metric(&metrics, "tollgate_queue_kernel_user_dropped_total")) as u64,
        kernel_drops(&s.lab),
        "the metrics report the kernel's overflow drops: {kernel:?}"
    );
    assert!(sum_metric(&metrics, "tollgate_queue_packets_total") > QUEUE_MAX_LEN as f64);
    assert_eq!(sum_metric(&metrics, "tollgate_queue_bypassed_total"), 0.0);
    // Everything the kernel handed to a worker was either received or lost
    // in its socket buffer, and lost means dropped here.
    assert_eq!(
        sum_metric(&metrics, "tollgate_queue_kernel_queued_total"),
        sum_metric(&metrics, "tollgate_queue_packets_total")
            + sum_metric(&metrics, "tollgate_queue_kernel_user_dropped_total"),
        "{kernel:?}"
    );
    eprintln!(
        "flood: {sent} SYNs sent, kernel {kernel:?}, worker packets {}, overflows (ENOBUFS) {}",
        sum_metric(&metrics, "tollgate_queue_packets_total"),
        sum_metric(&metrics, "tollgate_queue_overflows_total"),
    );
}

#[test]
fn syn_flood_fail_open_bypasses_only_while_overrun() {
    // One queue, so "the queue is full" is one condition.
    let Some(s) = setup(
        "syn_flood_fail_open_bypasses_only_while_overrun",
        FailMode::Open,
        Some(1),
    ) else {
        return;
    };
    let denied = SocketAddrV4::new(s.node, DENIED);
    s.agent.signal(libc::SIGSTOP);
    let flood = SynFlood::start(&s.lab, "client", denied);
    // The worker is overrun: the kernel accepts new connections without
    // asking anyone, so flood SYNs pass the filter table and a denied
    // connection connects.
    let overrun = poll_until(Duration::from_secs(20), || {
        (past_filter(&s.lab, DENIED) > 0).then_some(())
    });
    let while_overrun = s.lab.tcp("client", denied, ALLOW_WAIT);
    s.agent.signal(libc::SIGCONT);
    let sent = flood.finish();
    assert!(overrun.is_some(), "no flood SYN passed the overrun worker");
    assert_eq!(while_overrun, TcpOutcome::Connected, "fail-open bypass");
    wait_drained(&s.lab);
    let passed = past_filter(&s.lab, DENIED);
    assert!(
        poll_until(Duration::from_secs(5), || (s.listener.accepted() > 0)
            .then_some(()))
        .is_some(),
        "the denied listener accepted the bypassed connection"
    );
    // The kernel counts none of this as a drop; the metrics show it as
    // packets queued that the worker never received (nor is waiting for).
    assert_eq!(kernel_drops(&s.lab), 0);
    let metrics = scrape(&s.lab);
    let unverdicted = sum_metric(&metrics, "tollgate_queue_kernel_queued_total")
        - sum_metric(&metrics, "tollgate_queue_packets_total")
        - sum_metric(&metrics, "tollgate_queue_waiting");
    assert!(
        unverdicted > 0.0,
        "fail-open bypasses are visible in the metrics"
    );

    // With the worker running again, the same denial holds.
    s.lab.assert_tcp("client", denied, TcpOutcome::TimedOut);
    eprintln!(
        "fail-open: {sent} SYNs sent, {passed} passed the filter table while overrun, \
         {unverdicted} queued packets accepted without a verdict"
    );
}

/// Connections the L7 test holds open: more denied requests at once than
/// the L7 worker's socket buffer holds.
const L7_CONNECTIONS: usize = 300;
/// The L7 queues with the default configuration (two connection queues, the
/// DNS queue 102 reserved, two L7 queues).
const L7_QUEUES: std::ops::RangeInclusive<u32> = 103..=104;

/// Reads from `stream` until `done` says the answer is complete, the
/// connection ends (EOF or reset: `true`) or `deadline` passes.
fn read_answer(
    stream: &mut TcpStream,
    deadline: Instant,
    done: impl Fn(&str) -> bool,
) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut ended = false;
    while !done(&String::from_utf8_lossy(&got)) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                ended = true;
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(_) => {
                ended = true;
                break;
            }
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), ended)
}

#[test]
fn l7_denied_requests_stay_denied_when_the_worker_is_overrun() {
    let Some(s) = setup_with(
        "l7_denied_requests_stay_denied_when_the_worker_is_overrun",
        FailMode::Closed,
        None,
        Service::Http,
        "      l7Protocols:\n        - http:\n            method: GET\n            path: /ok*\n",
    ) else {
        return;
    };
    let to = SocketAddr::from((s.node, ALLOWED));
    // Established keep-alive connections, each served one allowed request.
    let mut streams: Vec<TcpStream> = (0..L7_CONNECTIONS)
        .map(|_| {
            let mut stream = s.lab.tcp_stream("client", to);
            stream
                .write_all(b"GET /ok HTTP/1.1\r\nHost: bench\r\n\r\n")
                .expect("send");
            let (answer, _) = read_answer(&mut stream, Instant::now() + ALLOW_WAIT, |a| {
                a.contains("ok GET /ok\n")
            });
            assert!(
                answer.contains("ok GET /ok\n"),
                "allowed request: {answer:?}"
            );
            stream
        })
        .collect();

    // The L7 worker stops; every connection sends a denied request at once.
    let l7_lost = || {
        s.lab
            .queue_counters()
            .iter()
            .filter(|c| L7_QUEUES.contains(&c.queue))
            .map(|c| c.user_dropped)
            .sum::<u64>()
    };
    s.agent.signal(libc::SIGSTOP);
    for stream in &mut streams {
        let _ = stream.write_all(b"GET /admin HTTP/1.1\r\nHost: bench\r\n\r\n");
    }
    let overrun = poll_until(Duration::from_secs(20), || (l7_lost() > 0).then_some(()));
    s.agent.signal(libc::SIGCONT);
    assert!(overrun.is_some(), "the L7 worker's socket never overflowed");

    // Lost segments are retransmitted and decided once the worker runs:
    // every denied request is answered 403 or reset, none reaches the server.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut denied, mut passed, mut silent) = (0, 0, 0);
    for stream in &mut streams {
        let (answer, ended) = read_answer(stream, deadline, |a| {
            a.contains(" 403 ") || a.contains("ok GET /admin")
        });
        if answer.contains("ok GET /admin") {
            passed += 1;
        } else if answer.contains(" 403 ") || (ended && answer.is_empty()) {
            denied += 1;
        } else {
            silent += 1;
        }
    }
    assert_eq!(passed, 0, "denied requests reached the server");
    assert_eq!(silent, 0, "unexpected answers");
    assert_eq!(denied, L7_CONNECTIONS);
    eprintln!(
        "L7 overrun: {L7_CONNECTIONS} denied requests, all denied; L7 segments lost and retransmitted: {}",
        l7_lost()
    );
}
