//! Learned FQDN addresses written to the kernel sets at rate: many replies
//! for distinct, never-seen names arrive at the DNS worker together, their
//! set writes share netlink batches, and each reply is released only once
//! the batch holding its addresses is acknowledged — also when a tiny
//! `fqdn.writeQueue` makes replies wait (delayed, never dropped).
//!
//! The proof of the order is read from the kernel, not from a connection:
//! new connections are classified against the worker's in-memory mirror,
//! which learns before any write, so a connection would succeed even with
//! a reply released before its write. Each client therefore asks the
//! kernel (`IPSET_CMD_TEST` over netlink, tens of microseconds) whether
//! the answered address is in the FQDN set the moment the reply reaches
//! it, and then connects to it (the positive control).
//!
//! Topology (lab link): node 10.I.1.1 (the clients and the agent), server
//! 10.I.1.2 (the in-process DNS server on 53 and HTTP on 80 for every
//! address of 10.I.100.0/22 and fd00:I:100::/64). Name `fK.fresh.test`
//! has 4 A and 4 AAAA records of its own.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Barrier;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use socket2::{Domain, Protocol, Socket, Type};

use crate::harness::dns::{DnsServer, LiveZone};
use crate::harness::{worker_counter, Agent, DnsRecord, Lab, Service};
use tollgate::datapath::ipset_netlink::parse_acks;
use tollgate::datapath::plan::fqdn_set;
use tollgate::datapath::Family;
use tollgate::fqdn::FqdnPattern;
use tollgate::netlink::{self, NLA_F_NET_BYTEORDER, NLM_F_ACK, NLM_F_REQUEST};

/// Clients asking at once, and names each asks in turn.
const CLIENTS: usize = 8;
const NAMES_PER_CLIENT: usize = 25;
const PATTERN: &str = "*.fresh.test";

struct FreshLab {
    lab: Lab,
    _dns: DnsServer,
}

/// The `k`-th (0..4) A and AAAA address of name `i`.
fn addresses(index: u8, i: usize, k: u8) -> [IpAddr; 2] {
    let host = u8::try_from(i + 1).expect("at most 254 names");
    [
        Ipv4Addr::new(10, index, 100 + k, host).into(),
        Ipv6Addr::new(
            0xfd00,
            u16::from(index),
            0x100,
            0,
            0,
            0,
            u16::from(k),
            u16::from(host),
        )
        .into(),
    ]
}

fn name(i: usize) -> String {
    format!("f{i}.fresh.test")
}

impl FreshLab {
    fn start(test: &'static str) -> Option<FreshLab> {
        let lab = Lab::builder(test).peer("server").ipv6().build()?;
        let index = lab.index();
        let server = lab.ns("server");
        server.ok(&format!(
            "ip route add local 10.{index}.100.0/22 dev lo && \
             ip -6 route add local fd00:{index:x}:100::/64 dev lo"
        ));
        lab.node().ok(&format!(
            "ip route add 10.{index}.100.0/22 via {s4} && ip -6 route add fd00:{index:x}:100::/64 via {s6}",
            s4 = lab.addr("server"),
            s6 = lab.addr6("server"),
        ));
        lab.serve_tcp("server", 80, Service::Http);
        let zone = (0..CLIENTS * NAMES_PER_CLIENT)
            .flat_map(|i| (0..4).flat_map(move |k| addresses(index, i, k)))
            .enumerate()
            .map(|(n, ip)| DnsRecord::address(&name(n / 8), ip, 300))
            .collect();
        let dns = DnsServer::start(server, 53, LiveZone::new(zone));
        lab.write_policy("fresh.yaml", &policy(&lab));
        Some(FreshLab { lab, _dns: dns })
    }

    /// The agent (node `sw`, one connection queue) with `extra` arguments,
    /// after its first ruleset.
    fn agent(&self, extra: &[&str]) -> Agent {
        let options = self
            .lab
            .agent_options()
            .node_name("sw")
            .labels(&[("role", "setwrites")])
            .queues(1)
            .args(extra);
        let mut agent = self.lab.start_agent(options);
        agent.wait_generation(1);
        agent
    }

    /// The DNS worker's counters in `tollgate status`.
    fn counter(&self, key: &str) -> u64 {
        let socket = self.lab.agent_options().status_socket;
        worker_counter(&socket, "dns", key).expect("the agent answers status")
    }

    /// Every client looks its names up at once (A for even names, AAAA
    /// for odd ones, one query each, never retried) and, the moment each
    /// reply arrives, asks the kernel whether the first answered address
    /// is in the FQDN set, then connects to it on port 80.
    fn lookups(&self) -> Vec<Outcome> {
        let server: SocketAddr = (self.lab.addr("server"), 53).into();
        let barrier = Barrier::new(CLIENTS);
        self.lab.node().enter(|| {
            std::thread::scope(|scope| {
                let clients: Vec<_> = (0..CLIENTS)
                    .map(|c| {
                        let barrier = &barrier;
                        scope.spawn(move || {
                            let mut kernel = KernelSets::open();
                            barrier.wait();
                            (0..NAMES_PER_CLIENT)
                                .map(|n| lookup(server, c * NAMES_PER_CLIENT + n, &mut kernel))
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                clients
                    .into_iter()
                    .flat_map(|c| c.join().expect("client thread"))
                    .collect()
            })
        })
    }
}

/// What one lookup met.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Answered; the address was in the kernel set at the reply; the
    /// connection succeeded.
    Good,
    NoReply(String),
    NotInSetAtReply(String, IpAddr),
    ConnectFailed(String, IpAddr),
}

fn lookup(server: SocketAddr, i: usize, kernel: &mut KernelSets) -> Outcome {
    let name = name(i);
    let record_type = if i.is_multiple_of(2) {
        RecordType::A
    } else {
        RecordType::AAAA
    };
    let mut query = Message::new(i as u16, MessageType::Query, OpCode::Query);
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(
        Name::from_ascii(format!("{name}.")).expect("name"),
        record_type,
    ));
    let socket = UdpSocket::bind("0.0.0.0:0").expect("bind");
    socket.connect(server).expect("connect");
    // Generous: under back-pressure replies wait, but never this long.
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    socket.send(&query.to_vec().expect("encode")).expect("send");
    let mut buf = [0u8; 1500];
    let Ok(n) = socket.recv(&mut buf) else {
        return Outcome::NoReply(name);
    };
    let reply = Message::from_vec(&buf[..n]).expect("reply");
    let Some(address) = reply.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(IpAddr::V4(a.0)),
        RData::AAAA(a) => Some(IpAddr::V6(a.0)),
        _ => None,
    }) else {
        return Outcome::NoReply(name);
    };
    if !kernel.holds(address) {
        return Outcome::NotInSetAtReply(name, address);
    }
    match TcpStream::connect_timeout(&(address, 80).into(), Duration::from_secs(3)) {
        Ok(_) => Outcome::Good,
        Err(_) => Outcome::ConnectFailed(name, address),
    }
}

/// `IPSET_CMD_TEST` of the FQDN sets over a netlink socket of the node.
struct KernelSets {
    socket: Socket,
    seq: u32,
}

impl KernelSets {
    fn open() -> KernelSets {
        let socket = Socket::new(
            Domain::from(libc::AF_NETLINK),
            Type::RAW,
            Some(Protocol::from(12)), // NETLINK_NETFILTER
        )
        .expect("netlink socket");
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        KernelSets { socket, seq: 0 }
    }

    /// Whether the set of [`PATTERN`] for `address`'s family holds it.
    fn holds(&mut self, address: IpAddr) -> bool {
        let pattern = FqdnPattern::new(PATTERN);
        let (set, family, kind, octets) = match address {
            IpAddr::V4(v4) => (fqdn_set(&pattern, Family::V4), 2, 1, v4.octets().to_vec()),
            IpAddr::V6(v6) => (fqdn_set(&pattern, Family::V6), 10, 2, v6.octets().to_vec()),
        };
        self.seq += 1;
        let mut out = Vec::new();
        // NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_TEST
        let start = netlink::begin(&mut out, (6 << 8) | 11, NLM_F_REQUEST | NLM_F_ACK, self.seq);
        out.extend_from_slice(&[family, 0, 0, 0]);
        netlink::attribute(&mut out, 1, &[6]); // IPSET_ATTR_PROTOCOL
        let mut set_name = set.into_bytes();
        set_name.push(0);
        netlink::attribute(&mut out, 2, &set_name); // IPSET_ATTR_SETNAME
        let data = netlink::nest_start(&mut out, 7); // IPSET_ATTR_DATA
        let ip = netlink::nest_start(&mut out, 1); // IPSET_ATTR_IP
        netlink::attribute(&mut out, kind | NLA_F_NET_BYTEORDER, &octets);
        netlink::nest_end(&mut out, ip);
        netlink::nest_end(&mut out, data);
        netlink::end(&mut out, start);
        self.socket.send(&out).expect("send test");
        let mut reply = [0u8; 4096];
        let n = (&self.socket).read(&mut reply).expect("test ack");
        let bytes = &reply[..n];
        let acks = parse_acks(bytes).expect("ack");
        match acks.as_slice() {
            [(seq, 0)] if *seq == self.seq => true,
            // IPSET_ERR_EXIST: not in the set.
            [(seq, -4103)] if *seq == self.seq => false,
            other => panic!("ipset test {address}: {other:?}"),
        }
    }
}

/// The agent's policy: node `sw` may ask the server and reach the
/// `*.fresh.test` names on port 80; everything else is dropped.
fn policy(lab: &Lab) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {{name: fresh-names}}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{{nodeSelector: {{matchLabels: {{role: setwrites}}}}}}]
  egress:
  - name: dns
    action: Allow
    to: [{{ipBlock: {{cidr: {server}/32}}}}]
    ports: [{{protocol: UDP, port: 53}}]
  - name: fresh
    action: Allow
    to: [{{fqdn: '{PATTERN}'}}]
    ports: [{{protocol: TCP, port: 80}}]
  - name: drop-all
    action: Drop
    to: [{{ipBlock: {{cidr: 0.0.0.0/0}}}}, {{ipBlock: {{cidr: '::/0'}}}}]
",
        server = lab.addr("server"),
    )
}

/// Asserts every lookup was answered, found its address in the kernel
/// set at the reply and connected to it.
#[track_caller]
fn assert_all_good(outcomes: &[Outcome]) {
    let bad: Vec<&Outcome> = outcomes.iter().filter(|o| **o != Outcome::Good).collect();
    assert_eq!(outcomes.len(), CLIENTS * NAMES_PER_CLIENT);
    assert!(
        bad.is_empty(),
        "{} of {}: {bad:?}",
        bad.len(),
        outcomes.len()
    );
}

/// 8 clients × 25 fresh names, IPv4 and IPv6: every reply finds its
/// address in the kernel set when it arrives, every first connection
/// succeeds, and the replies shared batches (fewer batches than replies
/// held). Before the lookups an address of the zone is not reachable
/// (the firewall is closed to it).
///
/// Mutation: the worker releases each reply at once and writes the queue
/// only on its once-a-second expiry tick (`Pushed::Held` replies given
/// their verdict in `packet`, `flush` moved under the `EXPIRE_EVERY`
/// check) — replies arrive before their addresses are in the kernel set
/// (200 of 200). Mutation: the queue written after every reply (`flush`
/// at the end of `packet`) — 200 batches for 200 replies.
#[test]
fn fresh_names_at_once_share_batches_and_no_reply_goes_before_its_write() {
    let Some(lab) =
        FreshLab::start("fresh_names_at_once_share_batches_and_no_reply_goes_before_its_write")
    else {
        return;
    };
    let _agent = lab.agent(&[]);
    let [v4, v6] = addresses(lab.lab.index(), CLIENTS * NAMES_PER_CLIENT - 1, 3);
    let closed = lab.lab.node().enter(move || {
        TcpStream::connect_timeout(&(v4, 80).into(), Duration::from_millis(500)).is_err()
            && TcpStream::connect_timeout(&(v6, 80).into(), Duration::from_millis(500)).is_err()
    });
    assert!(closed, "an unlearned address is not reachable");
    let outcomes = lab.lookups();
    assert_all_good(&outcomes);
    let (held, batches, entries) = (
        lab.counter("replies_held"),
        lab.counter("write_batches"),
        lab.counter("write_entries"),
    );
    eprintln!("replies held {held}, batches {batches}, entries {entries}");
    assert!(held >= outcomes.len() as u64, "held {held}");
    assert!(entries >= 4 * outcomes.len() as u64, "entries {entries}");
    assert!(
        batches < held,
        "replies that arrived together shared batches: {batches} batches for {held} replies"
    );
    assert_eq!(lab.counter("replies_delayed"), 0);
    assert_eq!(lab.counter("ipset_errors"), 0);
}

/// With `fqdn.writeQueue=1` every reply that finds another's writes
/// queued waits for them to be written: replies are delayed (counted),
/// none is dropped (each client sends its query once and never retries)
/// and none is released before its write.
///
/// Mutation: a reply that finds the queue full is dropped instead of
/// waiting (`out.give(packet.id, Action::Drop); return;` where
/// `must_wait` is true) — lookups go unanswered (16 of 200).
#[test]
fn a_full_write_queue_delays_replies_and_drops_none() {
    let Some(lab) = FreshLab::start("a_full_write_queue_delays_replies_and_drops_none") else {
        return;
    };
    let _agent = lab.agent(&["--set", "fqdn.writeQueue=1"]);
    let outcomes = lab.lookups();
    assert_all_good(&outcomes);
    let delayed = lab.counter("replies_delayed");
    eprintln!(
        "replies delayed {delayed}, held {}, batches {}, queue peak {}",
        lab.counter("replies_held"),
        lab.counter("write_batches"),
        lab.counter("write_queue_peak")
    );
    assert!(delayed > 0, "some replies found the queue full");
    assert!(
        lab.counter("write_queue_peak") <= 4,
        "the queue never held more than one reply's writes"
    );
}
