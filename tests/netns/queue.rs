//! An NFQUEUE worker (`tollgate::queue::Worker`) against the kernel, without
//! the agent and with a fixed test policy: allow (mark + NF_REPEAT, connmark
//! saved, one queued packet per connection), reject (TCP RST, ICMP
//! prohibited) and drop, over IPv4 and IPv6 (10.77.0.0/24, fd77::/64).

use crate::harness::{Lab, Service, TcpOutcome};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::{Duration, Instant};
use tollgate::config::{AgentConfig, L7Config, MachineDefaults, QueueRange};
use tollgate::datapath::plan::l7_queue_of;
use tollgate::datapath::{desired, reconcile, Iptables};
use tollgate::decide::{Policy, Ruling};
use tollgate::fqdn::{FqdnLookup, FqdnTable};
use tollgate::packet::flow::{Flow, Transport, Verdict};
use tollgate::ruleset::Enforced;
use tollgate::telemetry::Metrics;
use tollgate::workers::{Observers, Worker};

/// Allows TCP 80 and ICMP echo replies' peers, rejects TCP 81 and ICMP
/// echo, drops the rest.
struct TestPolicy;

impl Policy for TestPolicy {
    fn decide(&self, flow: &Flow, _: &dyn FqdnLookup) -> Ruling {
        Ruling::plain(match flow.transport {
            Transport::Tcp { dst_port: 80, .. } => Verdict::Allow,
            Transport::Tcp { dst_port: 81, .. } => Verdict::Reject,
            Transport::Icmp {
                icmp_type: 8 | 128, ..
            } => Verdict::Reject,
            _ => Verdict::Drop,
        })
    }
}

#[test]
fn allow_reject_drop_through_the_queue() {
    let Some(lab) = Lab::builder("allow_reject_drop_through_the_queue")
        .unlinked("client")
        .require(&["nc", "conntrack", "ping"])
        .build()
    else {
        return;
    };
    let (node, client) = (lab.node(), lab.ns("client"));
    node.ok(&format!(
        "ip link add va type veth peer name vb netns {} && \
         ip addr add 10.77.0.1/24 dev va && ip addr add fd77::1/64 dev va nodad && ip link set va up",
        client.name()
    ));
    client.ok(
        "ip addr add 10.77.0.2/24 dev vb && ip addr add fd77::2/64 dev vb nodad && ip link set vb up",
    );
    // Port 80 takes the uploads (and answers their byte count); 81 and 82
    // listen, so a reset or a timeout there can only be the verdict's.
    lab.serve_tcp("node", 80, Service::Sink);
    lab.serve_tcp("node", 81, Service::Echo);
    lab.serve_tcp("node", 82, Service::Echo);

    let stats = node.enter(|| {
        let machine = MachineDefaults {
            node_name: "n".into(),
            queues: 1,
        };
        let config = AgentConfig::load(&machine, None, &[]).unwrap().config;
        let worker = Worker::spawn(
            config.queues.range().first(),
            &config.datapath,
            Arc::new(ArcSwap::from_pointee(TestPolicy)),
            Arc::new(FqdnTable::restore(vec![], Default::default(), &[], Instant::now()).0),
            Observers {
                metrics: Arc::new(Metrics::new()),
                observe: tollgate::workers::observe::spawn(Arc::default()).unwrap().0,
                audit: None,
                cache: None,
            },
        )
        .unwrap();
        let mut kernel = Iptables::detect().unwrap();
        let enforced = Enforced {
            node_ingress: true,
            node_egress: false,
            endpoints: vec![],
            verdict_cache: None,
            ..Enforced::default()
        };
        let queues = config.queue_numbers();
        reconcile(
            &mut kernel,
            &desired(&config.datapath, &queues, &enforced, &[]),
        )
        .unwrap();
        worker.stats
    });

    // Allowed, with a bulk transfer: one packet queued per connection.
    for addr in ["10.77.0.1", "fd77::1"] {
        client.ok(&format!("head -c 300000 /dev/zero | nc -N -w 3 {addr} 80"));
    }
    assert_eq!(stats.allowed.load(Ordering::Relaxed), 2);
    let conntrack = node.ok("conntrack -L -p tcp --dport 80 2>/dev/null");
    assert!(conntrack.contains("mark=1048576"), "{conntrack}");

    // Rejected: a reset, not a timeout.
    for addr in ["10.77.0.1:81", "[fd77::1]:81"] {
        let addr: SocketAddr = addr.parse().unwrap();
        lab.assert_tcp("client", addr, TcpOutcome::Refused);
    }

    // ICMP echo rejected with administratively prohibited.
    let ping = client.sh("ping -n -c 1 -W 2 10.77.0.1 2>&1");
    let text = ping.stdout;
    assert!(
        text.contains("Packet filtered") || text.contains("Prohibited"),
        "{text}"
    );
    let ping6 = client.sh("ping -n -6 -c 1 -W 2 fd77::1 2>&1");
    let text6 = ping6.stdout;
    assert!(
        text6.contains("Administratively prohibited") || text6.contains("prohibited"),
        "{text6}"
    );

    // Dropped: the client times out.
    lab.assert_tcp(
        "client",
        "10.77.0.1:82".parse::<SocketAddr>().unwrap(),
        TcpOutcome::TimedOut,
    );
    assert!(stats.dropped.load(Ordering::Relaxed) >= 1);
    assert!(stats.rejected.load(Ordering::Relaxed) >= 4);
    assert_eq!(stats.malformed.load(Ordering::Relaxed), 0);

    let counters = node.ok("cat /proc/net/netfilter/nfnetlink_queue");
    assert!(counters.trim_start().starts_with("100 "), "{counters}");
}

/// Allows `GET /api/*` to the node's port 8080 (L7 rule): every request
/// goes through an L7 queue.
const L7_POLICY: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: node-l7}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{nodeSelector: {matchLabels: {kubernetes.io/os: linux}}}]
  ingress:
  - name: allow-api
    action: Allow
    ports: [{protocol: TCP, port: 8080}]
    l7Protocols:
    - http: {method: GET, path: /api/*}
";

/// Connections per L7 queue of `--l7-queues 2` (102 and 103), from fixed
/// client ports (a connection's L7 queue follows its client port).
const PER_QUEUE: usize = 6;

/// Runs an agent with `l7_queues` L7 queues (102 on) whose first L7 worker
/// (queue 102) is stuck from its first packet, and sends one allowed
/// request from each of [`PER_QUEUE`] client ports of queue 102 and of
/// queue 103 (of two queues) at once: per client port, curl's HTTP status
/// and exit code (`200 0` answered; `000 28` curl's timeout). Every curl
/// must report (one that never ran fails the test).
fn answered_beside_a_stuck_l7_worker(
    test: &'static str,
    l7_queues: u16,
) -> Option<Vec<(u16, String)>> {
    let lab = Lab::builder(test)
        .peer("client")
        .require(&["curl"])
        .build()?;
    lab.serve_tcp("node", 8080, Service::Http);
    lab.write_policy("node.yaml", L7_POLICY);
    let node = lab.node_addr("client");
    let ports: Vec<u16> = ports_to(102, PER_QUEUE)
        .into_iter()
        .chain(ports_to(103, PER_QUEUE))
        .collect();
    let mut options = lab.agent_options().queues(1).args(&[
        "--l7-queues",
        &l7_queues.to_string(),
        "--stall-timeout",
        "120",
    ]);
    options
        .env
        .push(("TOLLGATE_FAULT_STALL".into(), "102:1".into()));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let script: String = ports
        .iter()
        .map(|port| {
            format!(
                "(curl -s -o /dev/null -w '{port} %{{http_code}} %{{exitcode}}\\n' --max-time 4 \
                 --local-port {port} http://{node}:8080/api/x || true) & "
            )
        })
        .collect();
    let out = lab.ns("client").ok(&format!("{script} wait"));
    let mut outcomes: Vec<(u16, String)> = out
        .lines()
        .filter_map(|l| {
            let (port, outcome) = l.split_once(' ')?;
            Some((port.parse().ok()?, outcome.to_string()))
        })
        .collect();
    outcomes.sort();
    assert_eq!(
        outcomes.iter().map(|(p, _)| *p).collect::<Vec<_>>(),
        {
            let mut sorted = ports.clone();
            sorted.sort();
            sorted
        },
        "every curl reports:\n{out}"
    );
    eprintln!("{l7_queues} L7 queue(s), queue 102 stuck: {outcomes:?}");
    agent.stop();
    Some(outcomes)
}

/// With two L7 queues, exactly the connections whose client port goes to
/// queue 103 are answered and those on the stuck 102 are not (fixed
/// ports: with ephemeral ones, all twelve fell on one queue about once in
/// 2,048 runs; audit 3, L9).
#[test]
fn a_stuck_l7_worker_does_not_stop_the_other_l7_queues() {
    let Some(outcomes) =
        answered_beside_a_stuck_l7_worker("a_stuck_l7_worker_does_not_stop_the_other_l7_queues", 2)
    else {
        return;
    };
    for (port, outcome) in &outcomes {
        let expected = match l7_queue_of(two_l7_queues(), *port) {
            103 => "200 0",
            _ => "000 28",
        };
        assert_eq!(outcome, expected, "client port {port}: {outcomes:?}");
    }
}

#[test]
fn one_stuck_l7_queue_stops_every_l7_request() {
    // The contrast: with one L7 queue, its stuck worker holds every
    // request (each curl ran, and timed out).
    let Some(outcomes) =
        answered_beside_a_stuck_l7_worker("one_stuck_l7_queue_stops_every_l7_request", 1)
    else {
        return;
    };
    assert!(outcomes.iter().all(|(_, o)| o == "000 28"), "{outcomes:?}");
}

/// The L7 queues of `--queues 1 --l7-queues 2`: 102 and 103.
fn two_l7_queues() -> QueueRange {
    L7Config {
        queue: 102,
        queues: 2,
        ..L7Config::default()
    }
    .range()
}

/// `n` client ports from 20000 on whose connections go to L7 queue `queue`.
fn ports_to(queue: u16, n: usize) -> Vec<u16> {
    (20_000..u16::MAX)
        .filter(|&port| l7_queue_of(two_l7_queues(), port) == queue)
        .take(n)
        .collect()
}

/// Packets the kernel ever queued to each bound queue (its id sequence).
fn queued(lab: &Lab) -> BTreeMap<u32, u64> {
    lab.queue_counters()
        .iter()
        .map(|c| (c.queue, c.id_sequence))
        .collect()
}

/// One `curl` from the client's local port `port` asking `GET /api/1` …
/// `/api/{requests}` of `base` on one kept-alive connection: per request,
/// the status and whether it opened a connection (`200 1`, then `200 0`).
fn keep_alive(lab: &Lab, base: &str, port: u16, requests: usize, max_time: u32) -> Vec<String> {
    let urls: String = (1..=requests)
        .map(|i| format!(" -o /dev/null {base}/api/{i}"))
        .collect();
    lab.ns("client")
        .ok(&format!(
            "curl -s -w '%{{http_code}} %{{num_connects}}\\n' --max-time {max_time} \
             --local-port {port}{urls} || true"
        ))
        .lines()
        .map(str::to_string)
        .collect()
}

/// One `GET /api/x` from the client's port `port` to `server` (IPv6) with
/// IPv6 extension headers on every segment: one header (a PadN option)
/// for each socket option in `headers` (`IPV6_HOPOPTS`, `IPV6_DSTOPTS`).
/// The answer's first line, or what went wrong.
fn request_with_extension_headers(
    lab: &Lab,
    port: u16,
    server: SocketAddr,
    headers: &[libc::c_int],
) -> String {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::AsRawFd;
    const PADN: [u8; 8] = [0, 0, 1, 4, 0, 0, 0, 0];
    lab.ns("client").enter(|| {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
        for &header in headers {
            // SAFETY: a valid socket and an 8-byte buffer that outlives the call.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    header,
                    PADN.as_ptr().cast(),
                    PADN.len() as libc::socklen_t,
                )
            };
            assert_eq!(
                rc,
                0,
                "option {header}: {}",
                std::io::Error::last_os_error()
            );
        }
        let local = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port));
        socket.bind(&local.into()).unwrap();
        if let Err(error) = socket.connect_timeout(&server.into(), Duration::from_secs(3)) {
            return format!("connect: {error}");
        }
        let mut stream = std::net::TcpStream::from(socket);
        stream
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        stream
            .write_all(b"GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut line = String::new();
        match BufReader::new(stream).read_line(&mut line) {
            Ok(_) => line.trim_end().to_string(),
            Err(error) => format!("read: {error}"),
        }
    })
}

/// `tollgate_l7_requests_total{queue, result="allowed"}` of each L7 queue.
fn allowed_requests(lab: &Lab, port: u16) -> BTreeMap<u16, u64> {
    let metrics = lab.node().ok(&format!(
        "curl -sS --max-time 5 http://127.0.0.1:{port}/metrics"
    ));
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("tollgate_l7_requests_total{") && l.contains("result=\"allowed\"")
        })
        .filter_map(|l| {
            let queue = l
                .split("queue=\"")
                .nth(1)?
                .split('"')
                .next()?
                .parse()
                .ok()?;
            Some((queue, l.rsplit_once(' ')?.1.parse::<f64>().ok()? as u64))
        })
        .collect()
}

#[test]
fn a_stuck_l7_queue_leaves_other_connections_of_the_same_client_answered() {
    let test = "a_stuck_l7_queue_leaves_other_connections_of_the_same_client_answered";
    let Some(lab) = Lab::builder(test)
        .peer("client")
        .ipv6()
        .require(&["curl"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Http);
    lab.write_policy("node.yaml", L7_POLICY);
    let base = format!("http://{}:8080", lab.node_addr("client"));
    let base6 = format!("http://[{}]:8080", lab.node_addr6("client"));
    let mut options = lab.agent_options().queues(1).args(&[
        "--l7-queues",
        "2",
        "--stall-timeout",
        "120",
        "--metrics-address",
        "127.0.0.1:9494",
    ]);
    // The worker of L7 queue 102 stops at its first packet.
    options
        .env
        .push(("TOLLGATE_FAULT_STALL".into(), "102:1".into()));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    let (on_103, stuck) = (ports_to(103, 5), ports_to(102, 1)[0]);
    let server6 = SocketAddr::from((lab.node_addr6("client"), 8080));
    let answered = ["200 1", "200 0", "200 0", "200 0", "200 0"];

    // Every packet of a connection, both ways, reaches the queue of its
    // client port: five requests on one connection to queue 103 are
    // answered and not one packet went to queue 102 (stuck for ever).
    assert_eq!(keep_alive(&lab, &base, on_103[0], 5, 6), answered);
    let first = queued(&lab);
    assert_eq!(first.get(&102), Some(&0), "{first:?}");
    assert!(first[&103] >= 6, "the SYN-ACK and five requests: {first:?}");

    // A connection of the same client to the same server on queue 102:
    // its SYN-ACK waits there. Meanwhile more connections of that client
    // on queue 103 are answered: IPv4, IPv6, and IPv6 with one and two
    // extension headers on the client's segments (not on the server's).
    let (stuck_codes, during, during6, extended, held) = std::thread::scope(|scope| {
        let stuck_curl = scope.spawn(|| keep_alive(&lab, &base, stuck, 1, 8));
        let held = crate::harness::poll_until(Duration::from_secs(6), || {
            let now = queued(&lab);
            (now[&102] >= 1).then_some(now[&102])
        });
        let during = keep_alive(&lab, &base, on_103[1], 5, 6);
        let during6 = keep_alive(&lab, &base6, on_103[2], 5, 6);
        let extended = [
            request_with_extension_headers(&lab, on_103[3], server6, &[libc::IPV6_DSTOPTS]),
            request_with_extension_headers(
                &lab,
                on_103[4],
                server6,
                &[libc::IPV6_HOPOPTS, libc::IPV6_DSTOPTS],
            ),
        ];
        (stuck_curl.join().unwrap(), during, during6, extended, held)
    });
    let last = queued(&lab);
    let requests = allowed_requests(&lab, 9494);
    eprintln!(
        "same client, same server: port {} (queue 103) alone: packets queued {first:?}; \
         then port {} (queue 103) {during:?}, IPv6 port {} (queue 103) {during6:?}, \
         IPv6 ports {} and {} with 1 and 2 extension headers {extended:?}, \
         port {stuck} (queue 102, stuck) {stuck_codes:?}: packets queued {last:?}; \
         allowed requests by queue {requests:?}",
        on_103[0], on_103[1], on_103[2], on_103[3], on_103[4]
    );
    assert!(held.is_some(), "nothing reached queue 102: {last:?}");
    assert_eq!(during, answered);
    assert_eq!(during6, answered);
    assert_eq!(extended, ["HTTP/1.1 200 OK"; 2]);
    assert!(
        stuck_codes.len() == 1 && stuck_codes[0].starts_with("000 "),
        "the connection on queue 102 was answered: {stuck_codes:?}"
    );
    assert_eq!(requests.get(&103), Some(&17));
    assert_eq!(requests.get(&102).copied().unwrap_or(0), 0);
    agent.stop();
}

#[test]
fn a_tiny_receive_buffer_overflows_and_is_counted() {
    let Some(lab) = Lab::builder("a_tiny_receive_buffer_overflows_and_is_counted")
        .peer("client")
        .require(&["curl"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Http);
    lab.write_policy("node.yaml", L7_POLICY);
    let node = lab.node_addr("client");
    let options = lab.agent_options().queues(1).args(&[
        "--queue-receive-buffer-bytes",
        "1",
        "--metrics-address",
        "127.0.0.1:9491",
    ]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    // The worker sleeps while 40 connections knock: the smallest socket
    // buffer holds a few of their SYNs' messages, the kernel loses the rest.
    agent.signal(libc::SIGSTOP);
    let script: String = (0..40)
        .map(|_| format!("(curl -s -o /dev/null --max-time 3 http://{node}:8081/ || true) & "))
        .collect();
    lab.ns("client").ok(&format!("{script} sleep 1"));
    agent.signal(libc::SIGCONT);
    let overflows = crate::harness::poll_until(std::time::Duration::from_secs(10), || {
        let metrics = lab
            .node()
            .ok("curl -sS --max-time 5 http://127.0.0.1:9491/metrics");
        let count: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("tollgate_queue_overflows_total{queue=\"100\"}"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        (count > 0.0).then_some(count)
    });
    assert!(
        overflows.is_some(),
        "no overflow counted; log:\n{}",
        agent.log()
    );
    agent.stop();
}

/// The sum of every L7 queue's `l7_flows_active` gauge, from the metrics
/// listener on the node's loopback `port`.
fn l7_flows_active(lab: &Lab, port: u16) -> u64 {
    lab.node()
        .ok(&format!(
            "curl -sS --max-time 5 http://127.0.0.1:{port}/metrics"
        ))
        .lines()
        .filter(|l| l.starts_with("tollgate_l7_flows_active"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum()
}

#[test]
fn idle_l7_flows_are_forgotten_on_time_without_traffic() {
    use std::io::{Read, Write};
    let Some(lab) = Lab::builder("idle_l7_flows_are_forgotten_on_time_without_traffic")
        .peer("client")
        .require(&["curl"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Http);
    lab.write_policy("node.yaml", L7_POLICY);
    let node = lab.node_addr("client");
    let options = lab.agent_options().queues(1).args(&[
        "--set",
        "l7.idleTimeoutSeconds=2",
        "--metrics-address",
        "127.0.0.1:9492",
    ]);
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    // One answered request on a connection kept open and silent: nothing
    // reaches an L7 queue after it.
    let mut stream = lab.tcp_stream("client", SocketAddr::from((node, 8080)));
    stream
        .write_all(b"GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = [0u8; 256];
    let n = stream.read(&mut answer).expect("an answer");
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    assert_eq!(l7_flows_active(&lab, 9492), 1);
    // The workers' tick runs without packets: the idle flow is forgotten
    // about when its 2 s run out, not at the next packet.
    let idle = Instant::now();
    let forgotten = crate::harness::poll_until(Duration::from_secs(10), || {
        (l7_flows_active(&lab, 9492) == 0).then(|| idle.elapsed())
    });
    let forgotten =
        forgotten.unwrap_or_else(|| panic!("the idle flow stayed; log:\n{}", agent.log()));
    eprintln!("idle flow forgotten after {forgotten:?} without traffic");
    assert!(forgotten <= Duration::from_secs(4), "{forgotten:?}");
    drop(stream);
    agent.stop();
}
