//! An NFQUEUE worker (`tollgate::queue::Worker`) against the kernel, without
//! the agent and with a fixed test policy: allow (mark + NF_REPEAT, connmark
//! saved, one queued packet per connection), reject (TCP RST, ICMP
//! prohibited) and drop, over IPv4 and IPv6 (10.77.0.0/24, fd77::/64).

use crate::harness::{Lab, Service, TcpOutcome};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;
use std::time::Instant;
use tollgate::config::{AgentConfig, MachineDefaults};
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
