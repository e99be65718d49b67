//! The harness's own tests, without the agent: probes tell a timeout from a
//! reset from an ICMP error and fail on a local error; labs route, clean up
//! even when their test panics, and only gone processes' labs are reaped.
//! If these fail, the other tests' verdicts mean nothing.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use super::{
    DnsRecord, Lab, PingOutcome, Resolution, Service, TcpOutcome, UdpOutcome, ALLOW_WAIT, DENY_WAIT,
};

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

#[test]
fn harness_probes_classify_outcomes() {
    let Some(lab) = Lab::builder("harness_probes_classify_outcomes")
        .peer("client")
        .peer("server")
        .ipv6()
        .fresh_sources()
        .require(&["ping"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("server", 8081, Service::Echo);
    lab.serve_tcp("server", 8082, Service::Echo);
    lab.serve_udp_echo("server", 5353);
    let (srv4, srv6) = (lab.addr("server"), lab.addr6("server"));

    // Routed through the node, both families.
    for ip in [IpAddr::from(srv4), IpAddr::from(srv6)] {
        lab.assert_tcp("client", sock(ip, 8080), TcpOutcome::Connected);
        lab.assert_tcp("client", sock(ip, 9999), TcpOutcome::Refused);
        assert_eq!(lab.ping("client", ip, ALLOW_WAIT), PingOutcome::Reply);
        assert_eq!(
            lab.udp("client", sock(ip, 5353), ALLOW_WAIT),
            UdpOutcome::Answered
        );
        assert_eq!(
            lab.udp("client", sock(ip, 5354), ALLOW_WAIT),
            UdpOutcome::Refused
        );
    }
    let mut stream = lab.tcp_stream("client", sock(srv4, 8080));
    assert!(super::probe::echo_roundtrip(&mut stream, b"hello", ALLOW_WAIT).unwrap());

    // Fresh sources: each connection comes from a new address of the
    // client's pool, routed both ways; a rule on the node for the pool
    // (and only the pool) tells them from the client's own address.
    let pool = lab.fresh_sources("client");
    let (net4, net6) = pool.networks();
    for ip in [IpAddr::from(srv4), IpAddr::from(srv6)] {
        lab.assert_tcp_fresh("client", sock(ip, 8080), TcpOutcome::Connected);
    }
    for (table, net) in [("iptables", net4), ("ip6tables", net6.expect("IPv6"))] {
        lab.node().ok(&format!(
            "{table} -w -A FORWARD -s {net} -p tcp --dport 8080 -j REJECT --reject-with tcp-reset"
        ));
    }
    for ip in [IpAddr::from(srv4), IpAddr::from(srv6)] {
        lab.assert_tcp_fresh("client", sock(ip, 8080), TcpOutcome::Refused);
        lab.assert_tcp("client", sock(ip, 8080), TcpOutcome::Connected);
    }
    assert_eq!(pool.handed_out(), [2, 2]);
    lab.node()
        .ok("iptables -w -D FORWARD 1 && ip6tables -w -D FORWARD 1");

    // The node's own firewall shapes what the probes see.
    let node = lab.node();
    node.run(&[
        "iptables", "-w", "-A", "FORWARD", "-p", "tcp", "--dport", "8081", "-j", "DROP",
    ]);
    node.run(&[
        "iptables",
        "-w",
        "-A",
        "FORWARD",
        "-p",
        "tcp",
        "--dport",
        "8082",
        "-j",
        "REJECT",
        "--reject-with",
        "icmp-admin-prohibited",
    ]);
    node.run(&[
        "iptables", "-w", "-A", "FORWARD", "-p", "icmp", "-j", "DROP",
    ]);
    lab.assert_tcp("client", sock(srv4, 8081), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(srv4, 8082), TcpOutcome::Unreachable);
    assert_eq!(lab.ping("client", srv4, DENY_WAIT), PingOutcome::NoReply);

    // A local error is not an outcome: the probe fails the test. EINVAL (a
    // link-local destination without a scope) for TCP; ping's exit 2 (no
    // route: the client's link is down) for ICMP.
    let local_error =
        |probe: &dyn Fn()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(probe)).is_err();
    let link_local: SocketAddr = "[fe80::1]:8080".parse().unwrap();
    assert!(local_error(&|| {
        lab.tcp("client", link_local, DENY_WAIT);
    }));
    assert!(local_error(&|| {
        lab.udp("client", link_local, DENY_WAIT);
    }));
    lab.ns("client").run(&["ip", "link", "set", "eth0", "down"]);
    assert!(local_error(&|| {
        lab.ping("client", srv4, DENY_WAIT);
    }));
    lab.ns("client").run(&["ip", "link", "set", "eth0", "up"]);

    let state = lab.firewall_state("node");
    assert_eq!(state.jumps("FORWARD", "DROP"), [2, 0], "{state}");
    assert!(state.duplicate_rules().is_empty());
    assert!(
        !state.iptables.contains('['),
        "counters not stripped:\n{state}"
    );
    assert!(lab.queue_counters().is_empty());
    assert!(lab.wait_listening("server", 8080, ALLOW_WAIT));
}

#[test]
fn harness_cleans_up_on_panic() {
    let built = std::panic::catch_unwind(|| -> Option<()> {
        let lab = Lab::builder("harness_cleans_up_on_panic")
            .peer("client")
            .build()?;
        lab.serve_tcp("client", 8080, Service::Echo);
        let names: Vec<String> = [lab.node().name(), lab.ns("client").name()]
            .map(String::from)
            .to_vec();
        let dir = lab.dir().to_path_buf();
        std::panic::panic_any((names, dir));
    });
    let payload = match built {
        Ok(None) => return, // skipped
        Ok(Some(())) => unreachable!(),
        Err(payload) => payload,
    };
    let (names, dir) = payload
        .downcast::<(Vec<String>, std::path::PathBuf)>()
        .map(|b| *b)
        .expect("the test's own panic");
    for name in names {
        assert!(
            !Path::new("/run/netns").join(&name).exists(),
            "namespace {name} survived the panic"
        );
    }
    // The directory is kept on panic for inspection; remove it here.
    assert!(dir.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn harness_dns_server_answers() {
    use hickory_proto::rr::RecordType;
    let Some(lab) = Lab::builder("harness_dns_server_answers")
        .peer("client")
        .peer("dns")
        .build()
    else {
        return;
    };
    let v6: std::net::Ipv6Addr = "fd00::7".parse().unwrap();
    lab.serve_dns(
        "dns",
        53,
        vec![
            DnsRecord::address("web.lab.test", [192, 0, 2, 10], 30),
            DnsRecord::address("web.lab.test", v6, 30),
            DnsRecord::cname("www.lab.test", "web.lab.test", 60),
            DnsRecord::address("*.wild.test", [192, 0, 2, 20], 5),
        ],
    );
    let server = sock(lab.addr("dns"), 53);
    let ask = |name: &str, rtype| lab.resolve("client", server, name, rtype, ALLOW_WAIT);
    let v4 = |a: [u8; 4]| IpAddr::from(a);
    assert_eq!(
        ask("Web.Lab.Test", RecordType::A),
        Resolution::Addresses(vec![(v4([192, 0, 2, 10]), 30)])
    );
    assert_eq!(
        ask("web.lab.test", RecordType::AAAA),
        Resolution::Addresses(vec![(IpAddr::from(v6), 30)])
    );
    assert_eq!(
        ask("www.lab.test", RecordType::A),
        Resolution::Addresses(vec![(v4([192, 0, 2, 10]), 30)])
    );
    assert_eq!(
        ask("a.b.wild.test", RecordType::A),
        Resolution::Addresses(vec![(v4([192, 0, 2, 20]), 5)])
    );
    assert_eq!(ask("wild.test", RecordType::A), Resolution::NxDomain);
    assert_eq!(ask("nope.test", RecordType::A), Resolution::NxDomain);
    // Nothing listens on 54: ICMP port unreachable. UDP 55 is dropped by
    // the server's namespace: no answer at all.
    let elsewhere = |port: u16| {
        lab.resolve(
            "client",
            sock(lab.addr("dns"), port),
            "web.lab.test",
            RecordType::A,
            DENY_WAIT,
        )
    };
    assert_eq!(elsewhere(54), Resolution::Refused);
    lab.ns("dns").run(&[
        "iptables", "-w", "-A", "INPUT", "-p", "udp", "--dport", "55", "-j", "DROP",
    ]);
    assert_eq!(elsewhere(55), Resolution::NoAnswer);
}

#[test]
fn harness_reaps_only_labs_of_gone_processes() {
    let Some(lab) = Lab::builder("harness_reaps_only_labs_of_gone_processes").build() else {
        return;
    };
    let netns = Path::new("/run/netns");
    let add = |name: &str| {
        let status = std::process::Command::new("ip")
            .args(["netns", "add", name])
            .status()
            .unwrap();
        assert!(status.success(), "ip netns add {name}");
    };
    // A lab of a process that is gone: its lock file exists, unlocked.
    let lock = Path::new(super::lab::LOCK_DIR).join("gone0.lock");
    std::fs::write(&lock, "").unwrap();
    add("tg1-gone0-node");
    // A lab without a lock file (another scheme, another tool): left alone.
    add("tg1-nolck-node");
    super::lab::reap_stale_labs();
    assert!(!netns.join("tg1-gone0-node").exists(), "stale lab kept");
    assert!(!lock.exists(), "stale lock file kept");
    let kept = netns.join("tg1-nolck-node").exists();
    super::lab::destroy_ns(&super::Netns::new("tg1-nolck-node"));
    assert!(kept, "a lab without a lock file was reaped");
    // This process holds its own lock: its lab is not stale.
    assert!(netns.join(lab.node().name()).exists(), "live lab reaped");
}

/// No root needed: the prober's window arithmetic.
#[test]
fn longest_failure_spans_from_a_failed_attempt_to_the_next_success() {
    use super::probe::{longest_failure, Attempt};
    use std::time::Duration;
    let ms = Duration::from_millis;
    let attempt = |at: u64, outcome| Attempt {
        at: ms(at),
        outcome,
        from: None,
    };
    let (ok, lost) = (TcpOutcome::Connected, TcpOutcome::TimedOut);
    assert!(longest_failure(&[attempt(0, ok), attempt(20, ok)]).is_none());
    let attempts = [
        attempt(0, ok),
        attempt(20, lost),
        attempt(40, ok),
        attempt(60, lost),
        attempt(80, TcpOutcome::Refused),
        attempt(100, lost),
        attempt(120, ok),
        attempt(140, lost),
    ];
    let (window, first, last) = longest_failure(&attempts).unwrap();
    assert_eq!((window, first.at, last.at), (ms(60), ms(60), ms(100)));
    // A run still failing at the end lasts until the last attempt.
    let (window, first, _) = longest_failure(&attempts[..6]).unwrap();
    assert_eq!((window, first.at), (ms(40), ms(60)));
}
