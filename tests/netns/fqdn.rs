//! FQDN egress end to end: `tollgate run` learns the answers of a real DNS
//! server (dnsmasq) into its sets before releasing them, for the node
//! itself (INPUT) and a Pod routed through it (FORWARD); and the netlink
//! ipset client the DNS worker writes with, against the kernel.
//!
//! The server namespace also answers HTTP on port 80 and echoes on port
//! 9000 for every address of 10.61.1-4.0/24; curl and dig are the clients.
//! Addresses: node–server link 10.61.0.0/24 (node .1, dnsmasq .2, malformed
//! responder .4, forger .5), node–pod link 10.61.5.0/24 (pod .2), web
//! addresses 10.61.1.0/24, 10.61.2.0/24 (one per race-test name),
//! 10.61.3.0/24 (large answers) and 10.61.4.0/24 (a large answer for the
//! system resolver).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream, UdpSocket};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{wait_until, Agent, Lab, Netns, Service, AGENT_WAIT};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tollgate::datapath::ipset_netlink::{EntryOp, IpsetSocket};
use tollgate::datapath::plan::fqdn_set;
use tollgate::datapath::Family;
use tollgate::fqdn::FqdnPattern;

const POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: fqdn-egress
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - nodeSelector:
      matchLabels: {role: fqdn}
  - podSelector:
      matchLabels: {app: client}
  egress:
  - name: dns
    action: Allow
    to: [{ipBlock: {cidr: 10.61.0.0/24}}]
    ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]
  - name: drop-dropped
    action: Drop
    to: [{fqdn: dropped.example.test}]
  - name: reject-rejected
    action: Reject
    to: [{fqdn: '*.rejected.test'}]
  - name: allow-example
    action: Allow
    to: [{fqdn: '*.example.test'}]
    ports: [{protocol: TCP, port: 80}, {protocol: TCP, port: 9000}]
  - name: allow-dropped-by-address
    action: Allow
    to: [{ipBlock: {cidr: 10.61.1.60/32}}]
    ports: [{protocol: TCP, port: 80}]
  - name: drop-all
    action: Drop
    to: [{ipBlock: {cidr: 0.0.0.0/0}}, {ipBlock: {cidr: '::/0'}}]
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: apps
  labels: {app: client}
spec: {nodeName: fq}
status:
  podIP: 10.61.5.2
  podIPs: [{ip: 10.61.5.2}]
";

/// The test zone dnsmasq serves.
fn zone() -> String {
    let mut conf = String::from(
        "host-record=www.example.test,10.61.1.10\n\
         host-record=other.test,10.61.1.20\n\
         cname=alias.example.test,real.other.test\n\
         host-record=real.other.test,10.61.1.30\n\
         host-record=tcp.example.test,10.61.1.40\n\
         host-record=short.example.test,10.61.1.50\n\
         host-record=dropped.example.test,10.61.1.60\n\
         host-record=www.rejected.test,10.61.1.70\n\
         host-record=later.example.test,10.61.1.90\n\
         host-record=six.example.test,fd61:1::10\n\
         host-record=six.other.test,fd61:1::20\n",
    );
    for i in 1..=200 {
        conf.push_str(&format!(
            "host-record=r{i}.example.test,10.61.2.{}\n",
            i % 250 + 1
        ));
    }
    for i in 1..=40 {
        conf.push_str(&format!("host-record=big.example.test,10.61.3.{i}\n"));
    }
    for i in 101..=180 {
        conf.push_str(&format!("host-record=huge.example.test,10.61.3.{i}\n"));
    }
    for i in 1..=40 {
        conf.push_str(&format!("host-record=sys.example.test,10.61.4.{i}\n"));
    }
    conf
}

/// The FQDN lab: node, server and Pod namespaces wired as the module doc
/// says, dnsmasq serving [`zone`], and the web servers. The namespaces are
/// the harness lab's, kept here by name for the tests' convenience.
struct FqdnLab {
    lab: Lab,
    node: Netns,
    server: Netns,
    pod: Netns,
}

impl FqdnLab {
    fn start(test: &'static str, local_ttl: u32) -> Option<FqdnLab> {
        let lab = Lab::builder(test)
            .unlinked("server")
            .unlinked("pod")
            .require(&["dnsmasq", "dig", "curl"])
            .build()?;
        let (node, server, pod) = (
            lab.node().clone(),
            lab.ns("server").clone(),
            lab.ns("pod").clone(),
        );
        node.ok(&format!(
            "sysctl -qw net.ipv4.ip_forward=1 && \
             ip link add vs type veth peer name vn netns {s} && \
             ip link add vp type veth peer name vn netns {p} && \
             ip addr add 10.61.0.1/24 dev vs && ip addr add fd61::1/64 dev vs nodad && \
             ip link set vs up && ip -6 route add fd61:1::/64 via fd61::2 && \
             ip addr add 10.61.5.1/24 dev vp && ip link set vp up && \
             for n in 1 2 3 4; do ip route add 10.61.$n.0/24 via 10.61.0.2; done",
            s = server.name(),
            p = pod.name()
        ));
        server.ok("ip link set vn up && \
             for a in 2 4 5; do ip addr add 10.61.0.$a/24 dev vn; done && \
             for n in 1 2 3 4; do ip route add local 10.61.$n.0/24 dev lo; done && \
             ip addr add fd61::2/64 dev vn nodad && ip -6 route add local fd61:1::/64 dev lo && \
             ip route add 10.61.5.0/24 via 10.61.0.1");
        pod.ok("ip addr add 10.61.5.2/24 dev vn && ip link set vn up && \
             ip route add default via 10.61.5.1");
        for role in ["node", "pod"] {
            lab.resolv_conf(role, "nameserver 10.61.0.2\noptions timeout:1 attempts:3\n");
        }
        lab.write_policy("fqdn.yaml", POLICY);
        let conf = lab.dir().join("zone.conf");
        std::fs::write(&conf, zone()).unwrap();
        lab.serve_tcp("server", 80, Service::Http);
        lab.serve_tcp("server", 9000, Service::Echo);
        lab.spawn(
            "server",
            &[
                "dnsmasq",
                "--no-daemon",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=10.61.0.2",
                "--user=root",
                &format!("--local-ttl={local_ttl}"),
                &format!("--conf-file={}", conf.display()),
                &format!("--pid-file={}", lab.dir().join("dnsmasq.pid").display()),
            ],
        );
        wait_until("dnsmasq answers", Duration::from_secs(10), || {
            node.sh("dig +short +time=1 +tries=1 @10.61.0.2 www.example.test")
                .stdout
                .starts_with("10.61.1.10")
        });
        Some(FqdnLab {
            lab,
            node,
            server,
            pod,
        })
    }

    /// Replaces the policy file.
    fn write_policy(&self, yaml: &str) {
        self.lab.write_policy("fqdn.yaml", yaml);
    }

    /// Starts the agent (node `fq`, `role=fqdn`, one queue, `extra`
    /// arguments) and waits for its first ruleset.
    fn agent(&self, extra: &[&str]) -> Agent {
        let options = self
            .lab
            .agent_options()
            .node_name("fq")
            .labels(&[("role", "fqdn")])
            .queues(1)
            .args(extra);
        let mut agent = self.lab.start_agent(options);
        agent.wait_generation(1);
        agent
    }

    /// HTTP status code curl got from `url` in `ns`, `000` when it failed,
    /// and curl's exit code.
    fn curl(&self, ns: &Netns, url: &str) -> (String, i32) {
        let out = ns.sh(&format!(
            "curl -s -o /dev/null -w '%{{http_code}}' --connect-timeout 1 --max-time 3 {url}"
        ));
        (out.stdout.clone(), out.code().unwrap_or(-1))
    }

    fn reachable(&self, ns: &Netns, url: &str) -> bool {
        self.curl(ns, url).0 == "200"
    }

    /// `tollgate get fqdn`, the agent reading its sets.
    fn learned(&self) -> String {
        self.node.ok(&format!(
            "{} get fqdn --policies {} --node-name fq --node-labels role=fqdn --socket {}",
            env!("CARGO_BIN_EXE_tollgate"),
            self.lab.policy_dir().display(),
            self.lab.agent_options().status_socket.display()
        ))
    }
}

/// The value of `key=` in the log line containing `line`.
fn log_value(log: &str, line: &str, key: &str) -> u64 {
    let text = log
        .lines()
        .find(|l| l.contains(line))
        .unwrap_or_else(|| panic!("no {line:?} in\n{log}"));
    // The line names the counters above 0 only, and says so.
    let zero = text.ends_with(" counters 0)") || text.ends_with(" counter 0)");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .or(zero.then_some(0))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

#[test]
fn allowed_names_reachable_others_denied_with_drop_reject_and_cname() {
    let Some(lab) = FqdnLab::start(
        "allowed_names_reachable_others_denied_with_drop_reject_and_cname",
        300,
    ) else {
        return;
    };
    // Snooping alone (resolve-ahead would learn dropped.example.test at
    // once; tests/netns/resolve.rs covers it).
    let mut agent = lab.agent(&["--fqdn-resolve", "off"]);
    let node = &lab.node;

    // Direct access to an address never learned: dropped by drop-all.
    assert_ne!(lab.curl(node, "http://10.61.1.10/").0, "200");
    // The allowed name resolves and is reachable; then also by address.
    assert_eq!(lab.curl(node, "http://www.example.test/").0, "200");
    assert!(lab.reachable(node, "http://10.61.1.10/"));
    // A name no rule allows is not, though it resolved fine.
    assert_eq!(lab.curl(node, "http://other.test/").1, 28, "timeout");
    assert!(lab.learned().contains("10.61.1.10"));
    assert!(!lab.learned().contains("10.61.1.20"));

    // IPv6: AAAA answers fill the v6 set; ip6tables decides.
    assert_eq!(lab.curl(node, "-6 http://[fd61:1::10]/").1, 28);
    assert!(lab.reachable(node, "-6 http://six.example.test/"));
    assert!(lab.reachable(node, "-6 http://[fd61:1::10]/"));
    assert_eq!(lab.curl(node, "-6 http://six.other.test/").1, 28);

    // CNAME chain: the selector matches the alias, the address belongs
    // to the target name.
    assert!(lab.reachable(node, "http://alias.example.test/"));

    // Reject with fqdn: before the lookup the address falls to drop-all
    // (timeout), after it the Reject rule answers with a reset.
    assert_eq!(lab.curl(node, "http://10.61.1.70/").1, 28);
    assert_eq!(lab.curl(node, "http://www.rejected.test/").1, 7, "refused");
    assert_eq!(lab.curl(node, "http://10.61.1.70/").1, 7);

    // Drop with fqdn, ahead of an ipBlock allow of the same address.
    assert!(lab.reachable(node, "http://10.61.1.60/"));
    assert_eq!(lab.curl(node, "http://dropped.example.test/").1, 28);
    assert_eq!(lab.curl(node, "http://10.61.1.60/").1, 28);

    // A Pod routed through the node: its lookups are learned on FORWARD.
    assert_eq!(lab.curl(&lab.pod, "http://10.61.1.90/").1, 28);
    assert!(lab.reachable(&lab.pod, "http://later.example.test/"));
    assert_eq!(lab.curl(&lab.pod, "http://other.test/").1, 28);

    let table = lab.learned();
    assert!(table.contains("*.example.test"), "{table}");
    assert!(table.contains("10.61.1.90"), "{table}");
    assert!(table.contains("fd61:1::10"), "{table}");
    let log = agent.stop();
    assert!(log_value(&log, "dns stats", "parsed") >= 6, "{log}");
    assert_eq!(log_value(&log, "dns stats", "ipset_errors"), 0, "{log}");
}

#[test]
fn first_connection_right_after_the_answer_never_loses_the_race() {
    let Some(lab) = FqdnLab::start(
        "first_connection_right_after_the_answer_never_loses_the_race",
        300,
    ) else {
        return;
    };
    let mut agent = lab.agent(&[]);
    // 200 names, each with its own address never seen before: every
    // connection is the first one after its answer.
    let out = lab.node.ok("for i in $(seq 1 200); do \
           curl -4 -s -o /dev/null -w '%{http_code}\\n' --connect-timeout 2 --max-time 4 \
             http://r$i.example.test/; \
         done");
    let codes: Vec<&str> = out.lines().collect();
    assert_eq!(codes.len(), 200);
    let failures = codes.iter().filter(|c| **c != "200").count();
    assert_eq!(failures, 0, "{out}");
    let log = agent.stop();
    assert!(log_value(&log, "queue stats", "dropped") == 0, "{log}");
    assert!(log_value(&log, "dns stats", "learned") >= 200, "{log}");
}

#[test]
fn ttl_expiry_denies_new_connections_and_keeps_established_ones() {
    let Some(lab) = FqdnLab::start(
        "ttl_expiry_denies_new_connections_and_keeps_established_ones",
        2,
    ) else {
        return;
    };
    let _agent = lab.agent(&["--fqdn-min-ttl", "1"]);
    lab.node
        .ok("dig +short @10.61.0.2 short.example.test | grep -q 10.61.1.50");
    let mut established = lab.node.enter(|| {
        TcpStream::connect_timeout(&"10.61.1.50:9000".parse().unwrap(), Duration::from_secs(2))
            .unwrap()
    });
    established
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut reader = BufReader::new(established.try_clone().unwrap());
    let mut echo = |text: &str| {
        established.write_all(text.as_bytes()).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, text);
    };
    echo("before expiry\n");
    wait_until(
        "the kernel expires the entry",
        Duration::from_secs(10),
        || !lab.node.ok("ipset list").contains("10.61.1.50"),
    );
    assert_eq!(lab.curl(&lab.node, "http://10.61.1.50/").1, 28);
    echo("after expiry\n");
    // A new lookup allows again.
    assert!(lab.reachable(&lab.node, "http://short.example.test/"));
}

#[test]
fn dns_over_tcp_and_the_tcp_retry_of_a_truncated_answer_are_learned() {
    let Some(lab) = FqdnLab::start(
        "dns_over_tcp_and_the_tcp_retry_of_a_truncated_answer_are_learned",
        300,
    ) else {
        return;
    };
    let mut agent = lab.agent(&[]);
    let node = &lab.node;
    assert_eq!(lab.curl(node, "http://10.61.1.40/").1, 28);
    assert_eq!(
        node.ok("dig +tcp +short @10.61.0.2 tcp.example.test")
            .trim(),
        "10.61.1.40"
    );
    assert!(lab.reachable(node, "http://10.61.1.40/"));

    // 40 addresses do not fit 512 bytes: without EDNS the UDP answer is
    // truncated (TC) and dig retries over TCP.
    let udp = node.ok("dig +noedns +ignore @10.61.0.2 big.example.test");
    assert!(udp.contains(" tc"), "{udp}");
    let answer = node.ok("dig +noedns +short @10.61.0.2 big.example.test");
    assert_eq!(answer.lines().count(), 40, "{answer}");
    let table = lab.learned();
    for i in 1..=40 {
        assert!(table.contains(&format!("10.61.3.{i} ")), "{table}");
    }
    assert!(lab.reachable(node, "http://10.61.3.33/"));
    // The system resolver (glibc, through curl) does the same on its own:
    // a name nobody asked for yet, with 40 addresses of its own.
    assert_eq!(lab.curl(node, "http://10.61.4.1/").1, 28);
    assert!(!lab.learned().contains("10.61.4."));
    assert!(lab.reachable(node, "http://sys.example.test/"));
    let table = lab.learned();
    for i in 1..=40 {
        assert!(table.contains(&format!("10.61.4.{i} ")), "{table}");
    }

    // A message split across TCP segments (MTU 576: 80 records do not fit
    // one segment; gso_max_segs 1: the server's stack sends real segments,
    // not one GSO packet that only the queue would split) is reassembled
    // before it is learned.
    node.ok("ip link set dev vs mtu 576");
    lab.server
        .ok("ip link set dev vn mtu 576 && ip link set dev vn gso_max_segs 1");
    let mut tcpdump = node
        .command(&[
            "tcpdump",
            "-c",
            "2",
            "-l",
            "-n",
            "-i",
            "vs",
            "tcp src port 53 and greater 100",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = BufReader::new(tcpdump.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(
            ready.read_line(&mut line).unwrap() > 0,
            "tcpdump did not start"
        );
    }
    let answer = node.ok("dig +tcp +short @10.61.0.2 huge.example.test");
    assert_eq!(answer.lines().count(), 80, "{answer}");
    // Two reply segments of more than 100 bytes end the capture.
    let two_segments = wait_for_exit(&mut tcpdump, Duration::from_secs(5));
    let _ = tcpdump.kill();
    let mut text = String::new();
    tcpdump
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let _ = tcpdump.wait();
    assert!(two_segments, "one segment only:\n{text}");
    let table = lab.learned();
    for i in 101..=180 {
        assert!(table.contains(&format!("10.61.3.{i} ")), "{table}");
    }
    assert!(lab.reachable(node, "http://10.61.3.177/"));
    let log = agent.stop();
    assert_eq!(log_value(&log, "dns stats", "tcp_untracked"), 0, "{log}");
    assert_eq!(log_value(&log, "dns stats", "oversized"), 0, "{log}");
}

/// Whether `child` exits within `deadline`.
fn wait_for_exit(child: &mut Child, deadline: Duration) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A DNS response for `question` with one A record.
fn answer(id: u16, question: &str, address: Ipv4Addr) -> Vec<u8> {
    let name = Name::from_ascii(question).unwrap();
    let mut message = Message::new(id, MessageType::Response, OpCode::Query);
    message.add_query(Query::query(name.clone(), RecordType::A));
    message.add_answer(Record::from_rdata(name, 300, RData::A(A(address))));
    message.to_vec().unwrap()
}

/// Answers queries on 10.61.0.4:53 with broken messages chosen by the
/// first label, and a valid answer for `good.example.test`.
fn serve_malformed(server: &Netns) {
    let socket = server.enter(|| UdpSocket::bind("10.61.0.4:53").unwrap());
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf) {
            let Ok(query) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let id = query.metadata.id;
            let Some(name) = query.queries.first().map(|q| q.name.to_ascii()) else {
                continue;
            };
            let good = answer(id, &name, Ipv4Addr::new(10, 61, 1, 80));
            let reply: Vec<u8> = if name.starts_with("trunc.") {
                good[..good.len() - 6].to_vec()
            } else if name.starts_with("garbage.") {
                let mut bytes = id.to_be_bytes().to_vec();
                bytes.extend([0x81, 0x80]);
                bytes.extend((0..60u8).map(|i| i.wrapping_mul(37) ^ 0xa5));
                bytes
            } else if name.starts_with("loop.") {
                // One question whose name is a pointer to itself.
                let mut bytes = id.to_be_bytes().to_vec();
                bytes.extend([0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
                bytes.extend([0xc0, 12, 0, 1, 0, 1]);
                bytes.extend([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 61, 1, 80]);
                bytes
            } else {
                good
            };
            let _ = socket.send_to(&reply, peer);
        }
    });
}

#[test]
fn forged_and_malformed_replies_are_not_learned_and_the_worker_keeps_running() {
    let Some(lab) = FqdnLab::start(
        "forged_and_malformed_replies_are_not_learned_and_the_worker_keeps_running",
        300,
    ) else {
        return;
    };
    serve_malformed(&lab.server);
    // Snooping alone: the agent's own queries would be parsed too.
    let mut agent = lab.agent(&["--fqdn-resolve", "off"]);
    let node = &lab.node;

    // A reply from a host the node never asked: no tracked connection.
    let forger = lab
        .server
        .enter(|| UdpSocket::bind("10.61.0.5:53").unwrap());
    let forged = answer(7, "forged.example.test.", Ipv4Addr::new(10, 61, 1, 66));
    for port in [40000u16, 53, 33333] {
        forger
            .send_to(&forged, (IpAddr::from([10, 61, 0, 1]), port))
            .unwrap();
    }

    for name in ["trunc", "garbage", "loop"] {
        // dig reports the broken reply; only the agent's counters matter.
        node.sh(&format!(
            "dig +tries=1 +time=1 @10.61.0.4 {name}.example.test"
        ));
    }
    assert_eq!(lab.curl(node, "http://10.61.1.80/").1, 28);
    assert_eq!(
        node.ok("dig +short +tries=1 @10.61.0.4 good.example.test")
            .trim(),
        "10.61.1.80"
    );
    assert!(lab.reachable(node, "http://10.61.1.80/"));
    assert_eq!(lab.curl(node, "http://10.61.1.66/").1, 28);
    assert!(!lab.learned().contains("10.61.1.66"));
    let log = agent.stop();
    assert!(log_value(&log, "dns stats", "failed") >= 3, "{log}");
    assert_eq!(log_value(&log, "dns stats", "parsed"), 1, "{log}");
}

#[test]
fn only_trusted_servers_are_learned_from_when_configured() {
    let Some(lab) = FqdnLab::start("only_trusted_servers_are_learned_from_when_configured", 300)
    else {
        return;
    };
    serve_malformed(&lab.server);
    let mut agent = lab.agent(&["--dns-trusted-server", "10.61.0.4"]);
    // dnsmasq (10.61.0.2) answers, but is not trusted.
    assert_eq!(lab.curl(&lab.node, "http://www.example.test/").1, 28);
    assert_eq!(
        lab.node
            .ok("dig +short +tries=1 @10.61.0.4 good.example.test")
            .trim(),
        "10.61.1.80"
    );
    assert!(lab.reachable(&lab.node, "http://10.61.1.80/"));
    let log = agent.stop();
    assert!(log_value(&log, "dns stats", "untrusted") >= 1, "{log}");
}

#[test]
fn restart_keeps_learned_addresses_working() {
    let Some(lab) = FqdnLab::start("restart_keeps_learned_addresses_working", 300) else {
        return;
    };
    let mut agent = lab.agent(&[]);
    assert!(lab.reachable(&lab.node, "http://www.example.test/"));
    agent.stop();
    // The rules and the learned sets outlive a clean shutdown.
    let kept = lab.node.ok("ipset list -n; iptables-save");
    assert!(kept.contains("TOLLGATE"), "{kept}");
    assert!(lab.node.ok("ipset save").contains("10.61.1.10 timeout"));

    let mut agent = lab.agent(&[]);
    agent.wait_for_log("fqdn mirror restored", AGENT_WAIT);
    assert!(log_value(&agent.log(), "fqdn mirror restored", "restored") >= 1);
    // No new lookup: the restored mirror decides.
    assert!(lab.reachable(&lab.node, "http://10.61.1.10/"));
    assert_eq!(lab.curl(&lab.node, "http://10.61.1.20/").1, 28);
    drop(agent);
}

#[test]
fn policy_change_starts_new_selectors_empty_and_destroys_removed_sets() {
    let Some(lab) = FqdnLab::start(
        "policy_change_starts_new_selectors_empty_and_destroys_removed_sets",
        300,
    ) else {
        return;
    };
    // Snooping alone: resolve-ahead fills an exact new selector at once
    // (tests/netns/resolve.rs).
    let mut agent = lab.agent(&["--fqdn-resolve", "off"]);
    assert!(lab.reachable(&lab.node, "http://www.example.test/"));
    assert!(lab.reachable(&lab.node, "http://10.61.1.10/"));
    let old = fqdn_set(&FqdnPattern::new("*.example.test"), Family::V4);
    let kept = fqdn_set(&FqdnPattern::new("*.rejected.test"), Family::V4);
    let new = fqdn_set(&FqdnPattern::new("www.example.test"), Family::V4);
    assert!(lab.node.ok("ipset list -n").contains(&old));

    let changed = POLICY.replace("fqdn: '*.example.test'", "fqdn: www.example.test");
    lab.write_policy(&changed);
    agent.wait_generation(2);
    let sets = lab.node.ok("ipset list -n");
    assert!(!sets.contains(&old), "{sets}");
    assert!(sets.contains(&kept) && sets.contains(&new), "{sets}");
    // The new selector starts empty: the address learned for the old one
    // does not carry over, until the next answer.
    assert_eq!(lab.curl(&lab.node, "http://10.61.1.10/").1, 28);
    assert!(lab.reachable(&lab.node, "http://www.example.test/"));
    assert!(lab.reachable(&lab.node, "http://10.61.1.10/"));
    assert_eq!(lab.curl(&lab.node, "http://alias.example.test/").1, 28);
}

#[test]
fn fqdn_rules_added_by_a_reload_start_the_dns_worker() {
    let Some(lab) = FqdnLab::start("fqdn_rules_added_by_a_reload_start_the_dns_worker", 300) else {
        return;
    };
    let without_fqdn: String = POLICY
        .lines()
        .filter(|l| !l.contains("fqdn:"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "  - name: drop-dropped\n    action: Drop\n  - name: reject-rejected\n    action: Reject\n  - name: allow-example\n    action: Allow\n    ports: [{protocol: TCP, port: 80}, {protocol: TCP, port: 9000}]\n",
            "",
        );
    assert!(!without_fqdn.contains("allow-example"), "{without_fqdn}");
    lab.write_policy(&without_fqdn);
    let mut agent = lab.agent(&[]);
    assert!(!agent.log().contains("dns worker started"));
    assert_eq!(lab.curl(&lab.node, "http://www.example.test/").1, 28);
    lab.write_policy(POLICY);
    agent.wait_generation(2);
    assert!(
        agent.log().contains("dns worker started"),
        "{}",
        agent.log()
    );
    assert!(lab.reachable(&lab.node, "http://www.example.test/"));
}

#[test]
fn netlink_client_adds_refreshes_and_deletes_entries() {
    let Some(lab) = Lab::builder("netlink_client_adds_refreshes_and_deletes_entries").build()
    else {
        return;
    };
    let ns = lab.node();
    ns.ok(
        "ipset create tollgate-fqdn-t-v4 hash:ip family inet timeout 300 && \
         ipset create tollgate-fqdn-t-v6 hash:ip family inet6 timeout 300",
    );
    let v4 = |last: u8| IpAddr::from([10, 61, 9, last]);
    ns.enter(|| {
        let mut socket = IpsetSocket::open().unwrap();
        socket
            .apply(&[
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: v4(1),
                    timeout_secs: 100,
                },
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v6",
                    address: "fd61::1".parse().unwrap(),
                    timeout_secs: 50,
                },
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: v4(2),
                    timeout_secs: 9,
                },
            ])
            .unwrap();
        let added = ns.ok("ipset save");
        let v4_timeout = |save: &str| timeout_of(save, "tollgate-fqdn-t-v4", "10.61.9.1");
        assert!(
            v4_timeout(&added).is_some_and(|t| (90..=100).contains(&t)),
            "{added}"
        );
        assert!(
            timeout_of(&added, "tollgate-fqdn-t-v4", "10.61.9.2").is_some(),
            "{added}"
        );
        // The refresh: an add of an existing entry with a longer timeout.
        socket
            .apply(&[
                EntryOp::Add {
                    set: "tollgate-fqdn-t-v4",
                    address: v4(1),
                    timeout_secs: 1000,
                },
                EntryOp::Del {
                    set: "tollgate-fqdn-t-v4",
                    address: v4(2),
                },
                EntryOp::Del {
                    set: "tollgate-fqdn-t-v4",
                    address: v4(3),
                },
            ])
            .unwrap();
        let refreshed = ns.ok("ipset save");
        assert!(
            v4_timeout(&refreshed).is_some_and(|t| (990..=1000).contains(&t)),
            "the timeout was not refreshed:\n{refreshed}"
        );
        assert_eq!(
            timeout_of(&refreshed, "tollgate-fqdn-t-v4", "10.61.9.2"),
            None,
            "{refreshed}"
        );
        let missing = socket.apply(&[EntryOp::Add {
            set: "tollgate-nope",
            address: v4(1),
            timeout_secs: 1,
        }]);
        assert!(missing.is_err(), "{missing:?}");
        // The socket stays usable after an error.
        socket
            .apply(&[EntryOp::Del {
                set: "tollgate-fqdn-t-v4",
                address: v4(1),
            }])
            .unwrap();
        socket
            .apply(&[EntryOp::Add {
                set: "tollgate-fqdn-t-v4",
                address: v4(1),
                timeout_secs: 1000,
            }])
            .unwrap();
    });
    let save = ns.ok("ipset save");
    let entries: Vec<&str> = save.lines().filter(|l| l.starts_with("add ")).collect();
    assert_eq!(entries.len(), 2, "{save}");
    let v4 = timeout_of(&save, "tollgate-fqdn-t-v4", "10.61.9.1");
    assert!(v4.is_some_and(|t| (990..=1000).contains(&t)), "{save}");
    let v6 = timeout_of(&save, "tollgate-fqdn-t-v6", "fd61::1");
    assert!(v6.is_some_and(|t| (40..=50).contains(&t)), "{save}");
}

/// The timeout left on `address` in `set`, from an `ipset save` dump
/// (`add <set> <address> timeout <seconds>`), compared as a number.
fn timeout_of(save: &str, set: &str, address: &str) -> Option<u32> {
    save.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["add", s, a, "timeout", t, ..] if s == set && a == address => t.parse().ok(),
            _ => None,
        }
    })
}

/// A DNS query for `name` (A, recursion desired).
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    message.to_vec().unwrap()
}

/// A full DNS queue never releases a reply unlearned, so flooding lookups
/// cannot take an address past an FQDN Drop rule: `dropped.example.test`
/// (10.61.1.60) is dropped by name ahead of an Allow of its address, and
/// an answer let through unlearned would make that Allow apply. One UDP
/// flow of the node to dnsmasq is answered (and learned) while the agent
/// runs; the agent is stopped (SIGSTOP), the flow sends 4,300 lookups
/// (more than the DNS queue's 4,096) paced for dnsmasq, then asks for
/// `dropped.example.test`: no answer to it may arrive while the agent is
/// stopped. After SIGCONT (positive controls) the held lookups are
/// answered, and the name is learned and dropped.
/// Mutation: the DNS queue fail-open again (`fail_open: true` in
/// `workers::dns`, `--queue-bypass` on its rules) → the answer arrives
/// while the agent is stopped.
#[test]
fn a_full_dns_queue_drops_replies_instead_of_releasing_them_unlearned() {
    let Some(lab) = FqdnLab::start(
        "a_full_dns_queue_drops_replies_instead_of_releasing_them_unlearned",
        300,
    ) else {
        return;
    };
    let mut agent = lab.agent(&["--fqdn-resolve", "off"]);
    let socket = lab.node.enter(|| {
        let socket = UdpSocket::bind("10.61.0.1:0").unwrap();
        socket.connect("10.61.0.2:53").unwrap();
        socket
    });
    // The queries the kernel holds stay charged to the socket: room for
    // all of them, or `send` would wait for the stopped agent.
    let room: libc::c_int = 16 << 20;
    // SAFETY: setsockopt on a socket this test owns, with a c_int value.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&socket),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (&room as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_SNDBUFFORCE: {}", std::io::Error::last_os_error());
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1500];
    let id_of = |bytes: &[u8]| u16::from_be_bytes([bytes[0], bytes[1]]);
    // The next datagram, waiting up to `wait` for it.
    let receive = |buf: &mut [u8], wait: Duration| -> Option<usize> {
        let end = Instant::now() + wait;
        loop {
            match socket.recv(buf) {
                Ok(n) => return Some(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return None,
            }
        }
    };
    socket.send(&query(1, "www.example.test")).unwrap();
    let n = receive(&mut buf, Duration::from_secs(3)).expect("the flow's first lookup is answered");
    assert_eq!(id_of(&buf[..n]), 1);

    agent.signal(libc::SIGSTOP);
    const FLOOD: u16 = 4300;
    const ASKED: u16 = FLOOD + 2;
    let mut sent = 0;
    for id in 2..=FLOOD + 1 {
        sent += u32::from(socket.send(&query(id, "other.test")).is_ok());
        if id % 50 == 0 {
            // dnsmasq's receive buffer holds a few hundred queries.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    socket.send(&query(ASKED, "dropped.example.test")).unwrap();
    let stopped_until = Instant::now() + Duration::from_secs(3);
    let mut answered_while_stopped = 0;
    let mut asked_answered = false;
    while let Some(n) = receive(
        &mut buf,
        stopped_until.saturating_duration_since(Instant::now()),
    ) {
        answered_while_stopped += 1;
        asked_answered |= n >= 2 && id_of(&buf[..n]) == ASKED;
    }
    agent.signal(libc::SIGCONT);
    assert!(
        sent > 4096,
        "only {sent} lookups sent: the DNS queue was not filled"
    );
    assert!(
        !asked_answered,
        "dropped.example.test was answered while the agent was stopped \
         ({answered_while_stopped} answers came through unlearned)"
    );
    // The replies the queue held are learned and released once it runs.
    let mut released = 0;
    while receive(&mut buf, Duration::from_secs(2)).is_some() {
        released += 1;
    }
    assert!(released > 0, "no held reply was released after SIGCONT");
    assert_eq!(
        lab.curl(&lab.node, "http://dropped.example.test/").1,
        28,
        "learned and dropped"
    );
    assert!(lab.learned().contains("10.61.1.60"));
    let log = agent.stop();
    assert!(log_value(&log, "dns stats", "learned") >= 1, "{log}");
}
