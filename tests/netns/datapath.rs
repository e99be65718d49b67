//! `tollgate run` enforcing policies on the wire: Node and Pod traffic by
//! ports, ipBlocks, selectors, tiers and priorities; established connections
//! across changes; fail-open and fail-closed after `kill -9`; clean
//! shutdown, restarts and reloads.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::harness::probe::{echo_roundtrip, total_queued};
use crate::harness::{
    FailMode, Lab, PingOutcome, Service, TcpOutcome, UdpOutcome, AGENT_WAIT, ALLOW_WAIT, DENY_WAIT,
};

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// A ClusterNetworkPolicy applied to the lab's node (`kubernetes.io/os=linux`).
/// `rules` is the YAML of `ingress:`/`egress:` sections, indented by 2.
fn node_policy(name: &str, tier: &str, priority: u32, rules: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: {name}
spec:
  priority: {priority}
  tier: {tier}
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
{rules}"
    )
}

/// A ClusterNetworkPolicy applied to Pods labelled `app: <app>`.
fn pod_policy(name: &str, tier: &str, priority: u32, app: &str, rules: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: {name}
spec:
  priority: {priority}
  tier: {tier}
  appliedTo:
    - podSelector:
        matchLabels:
          app: {app}
{rules}"
    )
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n{labels}")
}

/// A Pod on the lab's node with one container exposing `http` on 8080;
/// `ips[0]` is `status.podIP`, all of them `status.podIPs`.
fn pod(name: &str, ns: &str, labels: &[(&str, &str)], ips: &[IpAddr]) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    let pod_ips: String = ips
        .iter()
        .map(|ip| format!("    - ip: \"{ip}\"\n"))
        .collect();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels:
{labels}spec:
  nodeName: node
  containers:
    - name: main
      ports:
        - name: http
          containerPort: 8080
          protocol: TCP
status:
  podIP: \"{}\"
  podIPs:
{pod_ips}",
        ips[0]
    )
}

fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}

fn tcp_ports(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| format!("        - protocol: TCP\n          port: {p}\n"))
        .collect()
}

#[test]
fn node_ingress_drop_vs_reject() {
    let Some(lab) = Lab::builder("node_ingress_drop_vs_reject")
        .peer("client")
        .ipv6()
        .build()
    else {
        return;
    };
    for port in [8001, 8002, 8003] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    for port in [5301, 5302, 5303] {
        lab.serve_udp_echo("node", port);
    }
    let (v4, v6) = (lab.node_addr("client"), lab.node_addr6("client"));
    // The lab itself lets everything through.
    for port in [8001, 8002, 8003] {
        lab.assert_tcp("client", sock(v4, port), TcpOutcome::Connected);
    }
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "node-ingress",
            "securityops",
            5,
            &format!(
                "  ingress:
    - name: drop-8001
      action: Drop
      ports:
{}    - name: reject-8002
      action: Reject
      ports:
{}    - name: drop-udp-5301
      action: Drop
      ports:
        - protocol: UDP
          port: 5301
    - name: reject-udp-5302
      action: Reject
      ports:
        - protocol: UDP
          port: 5302
",
                tcp_ports(&[8001]),
                tcp_ports(&[8002])
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    for ip in [IpAddr::from(v4), IpAddr::from(v6)] {
        lab.assert_tcp("client", sock(ip, 8001), TcpOutcome::TimedOut);
        // Refused means a reset came back, not a timeout.
        lab.assert_tcp("client", sock(ip, 8002), TcpOutcome::Refused);
        lab.assert_tcp("client", sock(ip, 8003), TcpOutcome::Connected);
        // UDP: Drop is silence, Reject an ICMP administratively-prohibited.
        assert_eq!(
            lab.udp("client", sock(ip, 5301), DENY_WAIT),
            UdpOutcome::TimedOut
        );
        assert_eq!(
            lab.udp("client", sock(ip, 5302), ALLOW_WAIT),
            UdpOutcome::Unreachable
        );
        assert_eq!(
            lab.udp("client", sock(ip, 5303), ALLOW_WAIT),
            UdpOutcome::Answered
        );
    }
}

#[test]
fn ipblock_allow_except_then_drop() {
    let Some(lab) = Lab::builder("ipblock_allow_except_then_drop")
        .peer("client1")
        .peer("client2")
        .peer("client3")
        .peer("client4")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.serve_tcp("node", 8081, Service::Echo);
    let i = lab.index();
    // 10.I.0.0/22 holds client1..client3; client2's link is carved out;
    // client4 (10.I.4.2) lies outside.
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "cidr-except",
            "application",
            10,
            &format!(
                "  ingress:
    - name: allow-range
      action: Allow
      from:
        - ipBlock:
            cidr: 10.{i}.0.0/22
            except:
              - 10.{i}.2.0/24
      ports:
{ports}    - name: drop-rest
      action: Drop
      ports:
{ports}",
                ports = tcp_ports(&[8080])
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    for (client, expected) in [
        ("client1", TcpOutcome::Connected),
        ("client2", TcpOutcome::TimedOut),
        ("client3", TcpOutcome::Connected),
        ("client4", TcpOutcome::TimedOut),
    ] {
        lab.assert_tcp(client, sock(lab.node_addr(client), 8080), expected);
        // Every link works: 8081 is under no rule.
        lab.assert_tcp(
            client,
            sock(lab.node_addr(client), 8081),
            TcpOutcome::Connected,
        );
    }
}

#[test]
fn icmp_echo_dropped_tcp_passes() {
    let Some(lab) = Lab::builder("icmp_echo_dropped_tcp_passes")
        .peer("client")
        .require(&["ping"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    let node = lab.node_addr("client");
    assert_eq!(lab.ping("client", node, ALLOW_WAIT), PingOutcome::Reply);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "no-ping",
            "securityops",
            1,
            "  ingress:
    - name: drop-echo-request
      action: Drop
      protocols:
        - icmp:
            icmpType: 8
            icmpCode: 0
",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    assert_eq!(lab.ping("client", node, DENY_WAIT), PingOutcome::NoReply);
    lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);
    // The node's own pings still work: the echo replies coming in are type 0.
    assert_eq!(
        lab.ping("node", lab.addr("client"), ALLOW_WAIT),
        PingOutcome::Reply
    );
}

#[test]
fn node_egress_to_ipblock_dropped() {
    let Some(lab) = Lab::builder("node_egress_to_ipblock_dropped")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("server", 8081, Service::Echo);
    lab.serve_tcp("client", 8080, Service::Echo);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "egress-block",
            "securityops",
            5,
            &format!(
                "  egress:
    - name: drop-server-http
      action: Drop
      to:
        - ipBlock:
            cidr: {}
      ports:
{}",
                lab.subnet("server"),
                tcp_ports(&[8080])
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    lab.assert_tcp("node", sock(lab.addr("server"), 8080), TcpOutcome::TimedOut);
    lab.assert_tcp(
        "node",
        sock(lab.addr("server"), 8081),
        TcpOutcome::Connected,
    );
    lab.assert_tcp(
        "node",
        sock(lab.addr("client"), 8080),
        TcpOutcome::Connected,
    );
}

#[test]
fn pod_traffic_by_pod_and_namespace_selector() {
    let Some(lab) = Lab::builder("pod_traffic_by_pod_and_namespace_selector")
        .peer("client1")
        .peer("client2")
        .peer("server")
        .ipv6()
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("server", 9090, Service::Echo);
    lab.serve_tcp("client1", 8080, Service::Echo);
    lab.write_policy(
        "inventory.yaml",
        &docs(&[
            namespace("dev", &[("env", "dev")]),
            namespace("prod", &[("env", "prod")]),
            pod(
                "client1",
                "dev",
                &[("app", "client")],
                &[lab.addr("client1").into(), lab.addr6("client1").into()],
            ),
            pod(
                "client2",
                "prod",
                &[("app", "client")],
                &[lab.addr("client2").into(), lab.addr6("client2").into()],
            ),
            pod(
                "web",
                "prod",
                &[("app", "web")],
                &[lab.addr("server").into(), lab.addr6("server").into()],
            ),
        ]),
    );
    lab.write_policy(
        "web.yaml",
        &pod_policy(
            "web-ingress",
            "application",
            5,
            "web",
            "  ingress:
    - name: allow-prod-clients
      action: Allow
      from:
        - podSelector:
            matchLabels:
              app: client
          namespaceSelector:
            matchLabels:
              env: prod
      ports:
        - protocol: TCP
          port: http
    - name: drop-rest
      action: Drop
",
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    // Dual-stack Pods: the same verdicts over IPv4 and IPv6.
    for (web, client1) in [
        (
            IpAddr::from(lab.addr("server")),
            IpAddr::from(lab.addr("client1")),
        ),
        (lab.addr6("server").into(), lab.addr6("client1").into()),
    ] {
        lab.assert_tcp("client2", sock(web, 8080), TcpOutcome::Connected);
        lab.assert_tcp("client1", sock(web, 8080), TcpOutcome::TimedOut);
        // The named port covers 8080 only: 9090 falls to drop-rest.
        lab.assert_tcp("client2", sock(web, 9090), TcpOutcome::TimedOut);
        // Only web's ingress is restricted.
        lab.assert_tcp("server", sock(client1, 8080), TcpOutcome::Connected);
    }
}

#[test]
fn tier_priority_and_pass_order() {
    let Some(lab) = Lab::builder("tier_priority_and_pass_order")
        .peer("client1")
        .peer("client2")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("server", 8081, Service::Echo);
    let ports = tcp_ports(&[8080]);
    lab.write_policy(
        "inventory.yaml",
        &docs(&[
            namespace("prod", &[("env", "prod")]),
            pod(
                "one",
                "prod",
                &[("role", "client"), ("id", "one")],
                &[lab.addr("client1").into()],
            ),
            pod(
                "two",
                "prod",
                &[("role", "client"), ("id", "two")],
                &[lab.addr("client2").into()],
            ),
            pod(
                "web",
                "prod",
                &[("app", "web")],
                &[lab.addr("server").into()],
            ),
        ]),
    );
    lab.write_policy(
        "policies.yaml",
        &docs(&[
            // securityops comes before application whatever the priority
            // numbers: client "one" skips every application rule.
            pod_policy(
                "sec-pass-one",
                "securityops",
                10,
                "web",
                &format!(
                    "  ingress:
    - name: pass-one
      action: Pass
      from:
        - podSelector:
            matchLabels:
              id: one
      ports:
{}",
                    tcp_ports(&[8080, 8081])
                ),
            ),
            // Within application, priority 1 beats priority 5: Reject, not Drop.
            pod_policy(
                "app-reject-clients",
                "application",
                1,
                "web",
                &format!(
                    "  ingress:
    - name: reject-clients
      action: Reject
      from:
        - podSelector:
            matchLabels:
              role: client
      ports:
{ports}"
                ),
            ),
            pod_policy(
                "app-drop-all",
                "application",
                5,
                "web",
                &format!(
                    "  ingress:
    - name: drop-all
      action: Drop
      ports:
{ports}"
                ),
            ),
            // After Pass, the K8s NetworkPolicy decides.
            "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-clients
  namespace: prod
spec:
  podSelector:
    matchLabels:
      app: web
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector:
            matchLabels:
              role: client
      ports:
        - protocol: TCP
          port: 8080
"
            .to_string(),
        ]),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    let web = sock(lab.addr("server"), 8080);
    lab.assert_tcp("client1", web, TcpOutcome::Connected);
    lab.assert_tcp("client2", web, TcpOutcome::Refused);
    // Pass is not Allow: on 8081 the K8s policy isolates web and allows
    // nothing, so client "one" is denied although it was passed.
    lab.assert_tcp(
        "client1",
        sock(lab.addr("server"), 8081),
        TcpOutcome::TimedOut,
    );
}

#[test]
fn k8s_default_deny_not_undone_by_baseline() {
    let Some(lab) = Lab::builder("k8s_default_deny_not_undone_by_baseline")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    lab.serve_tcp("client", 8080, Service::Echo);
    lab.write_policy(
        "inventory.yaml",
        &docs(&[
            namespace("prod", &[("env", "prod")]),
            pod(
                "client",
                "prod",
                &[("app", "client")],
                &[lab.addr("client").into()],
            ),
            pod(
                "web",
                "prod",
                &[("app", "web")],
                &[lab.addr("server").into()],
            ),
        ]),
    );
    lab.write_policy(
        "baseline.yaml",
        &pod_policy(
            "baseline-allow-web",
            "baseline",
            1,
            "web",
            "  ingress:
    - name: allow-all
      action: Allow
",
        ),
    );
    let deny = "apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: default-deny-ingress
  namespace: prod
spec:
  podSelector:
    matchLabels:
      app: web
  policyTypes: [Ingress]
";
    lab.write_policy("deny.yaml", deny);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    let web = sock(lab.addr("server"), 8080);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);
    // Isolation is per direction: web may still open connections.
    lab.assert_tcp(
        "server",
        sock(lab.addr("client"), 8080),
        TcpOutcome::Connected,
    );

    // Without the K8s policy the baseline Allow (and the default) admit it.
    lab.remove_policy("deny.yaml");
    agent.wait_generation(2);
    lab.assert_tcp("client", web, TcpOutcome::Connected);
}

#[test]
fn established_connection_survives_policy_change() {
    let Some(lab) = Lab::builder("established_connection_survives_policy_change")
        .peer("client")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.serve_tcp("node", 8081, Service::Echo);
    let allow = node_policy(
        "node-ingress",
        "application",
        5,
        &format!(
            "  ingress:
    - name: allow-http
      action: Allow
      ports:
{}",
            tcp_ports(&[8080])
        ),
    );
    lab.write_policy("node.yaml", &allow);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    let node = lab.node_addr("client");
    // One connection decided by an Allow rule, one by falling through.
    let mut allowed = lab.tcp_stream("client", sock(node, 8080));
    let mut fell_through = lab.tcp_stream("client", sock(node, 8081));
    for stream in [&mut allowed, &mut fell_through] {
        assert!(echo_roundtrip(stream, b"before", ALLOW_WAIT).expect("echo before change"));
    }

    let deny = node_policy(
        "node-ingress",
        "application",
        5,
        &format!(
            "  ingress:
    - name: drop-http
      action: Drop
      ports:
{}",
            tcp_ports(&[8080, 8081])
        ),
    );
    lab.write_policy("node.yaml", &deny);
    agent.wait_generation(2);

    for stream in [&mut allowed, &mut fell_through] {
        assert!(echo_roundtrip(stream, b"after", ALLOW_WAIT).expect("established connection cut"));
    }
    lab.assert_tcp("client", sock(node, 8080), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(node, 8081), TcpOutcome::TimedOut);
}

#[test]
fn bulk_transfer_queues_only_first_packets() {
    let Some(lab) = Lab::builder("bulk_transfer_queues_only_first_packets")
        .peer("client")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Sink);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "node-ingress",
            "application",
            5,
            &format!(
                "  ingress:
    - name: allow-upload
      action: Allow
      ports:
{}",
                tcp_ports(&[8080])
            ),
        ),
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    let before = total_queued(&lab.queue_counters());
    let mut stream = lab.tcp_stream("client", sock(lab.node_addr("client"), 8080));
    const TOTAL: u64 = 50 * 1024 * 1024;
    let chunk = vec![0x5a_u8; 256 * 1024];
    {
        use std::io::{Read, Write};
        stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        for _ in 0..TOTAL / chunk.len() as u64 {
            stream.write_all(&chunk).expect("upload");
        }
        stream
            .shutdown(std::net::Shutdown::Write)
            .expect("half-close");
        let mut count = [0u8; 8];
        stream.read_exact(&mut count).expect("byte count");
        assert_eq!(
            u64::from_be_bytes(count),
            TOTAL,
            "server received all bytes"
        );
    }
    let counters = lab.queue_counters();
    let queued = total_queued(&counters) - before;
    eprintln!("50 MiB upload: {queued} packet(s) queued; counters {counters:?}");
    assert!(
        (1..=3).contains(&queued),
        "a 50 MiB upload queued {queued} packets (expected the first 1..3): {counters:?}"
    );
}

/// Starts an agent with `mode`, opens a decided connection, makes the
/// client's own tuple to the allowed port cached, kills the agent with
/// SIGKILL and returns what a new connection from a fresh source address
/// (a tuple no worker decided: it meets the queue nobody reads) does
/// afterwards. A privileged port stays reachable in every case, the
/// cached tuple is answered by the kernel (allowed, in both modes), and
/// the owned chains stay installed with their queue rules: with
/// `--queue-bypass` on every rule queueing new connections in fail-open,
/// on none in fail-closed.
fn outcome_after_kill(test: &'static str, mode: FailMode) -> Option<TcpOutcome> {
    let lab = Lab::builder(test).peer("client").fresh_sources().build()?;
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.serve_tcp("node", 2222, Service::Echo);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "node-ingress",
            "application",
            5,
            &format!(
                "  ingress:
    - name: allow-http
      action: Allow
      ports:
{}    - name: drop-ssh
      action: Drop
      ports:
{}",
                tcp_ports(&[8080]),
                tcp_ports(&[2222])
            ),
        ),
    );
    let mut options = lab.agent_options().fail_mode(mode);
    options
        .privileged
        .push(format!("{},tcp/2222", lab.subnet("client")));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    let node = lab.node_addr("client");
    // Privileged entries win over policy.
    lab.assert_tcp("client", sock(node, 2222), TcpOutcome::Connected);
    let mut established = lab.tcp_stream("client", sock(node, 8080));
    assert!(echo_roundtrip(&mut established, b"alive", ALLOW_WAIT).expect("echo"));
    // A second decision of the client's own tuple: the kernel caches it.
    lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);
    lab.wait_cached("client", &[(sock(node, 8080), 'a')]);

    agent.kill9();

    // What the kernel keeps: the chains, the jumps into them, and the
    // queue rules with the fail mode's bypass flag.
    let state = lab.firewall_state("node");
    for chain in ["INPUT", "OUTPUT", "FORWARD"] {
        let owned = format!("TOLLGATE-{chain}");
        assert_eq!(state.jumps(chain, &owned), [1, 1], "{chain}:\n{state}");
    }
    let queue_new: Vec<&str> = state
        .rules()
        .filter(|r| r.contains("--ctstate NEW -j NFQUEUE"))
        .collect();
    assert!(!queue_new.is_empty(), "no queue rules left:\n{state}");
    let bypass = mode == FailMode::Open;
    assert!(
        queue_new
            .iter()
            .all(|r| r.ends_with("--queue-bypass") == bypass),
        "{mode:?}: queue rules after kill -9:\n{state}"
    );

    // Decided connections are accepted in the kernel, with or without us.
    assert!(echo_roundtrip(&mut established, b"still", ALLOW_WAIT).expect("established after kill"));
    lab.assert_tcp("client", sock(node, 2222), TcpOutcome::Connected);
    // A recently seen tuple: the cache answers as the dead agent decided.
    lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);
    let wait = match mode {
        FailMode::Open => ALLOW_WAIT,
        FailMode::Closed => DENY_WAIT,
    };
    Some(lab.tcp_fresh("client", sock(node, 8080), wait))
}

/// Mutation (tried, issue 29): fail-closed queue rules written with
/// `--queue-bypass` fail it (the rule check, and the fresh connection
/// gets through); before issue 29 its new connection was fresh only by
/// chance (the tuple had been decided once, and is cached at its second
/// decision).
#[test]
fn fail_closed_after_kill() {
    if let Some(outcome) = outcome_after_kill("fail_closed_after_kill", FailMode::Closed) {
        assert_eq!(
            outcome,
            TcpOutcome::TimedOut,
            "fail-closed lets new connections through"
        );
    }
}

#[test]
fn fail_open_after_kill() {
    if let Some(outcome) = outcome_after_kill("fail_open_after_kill", FailMode::Open) {
        assert_eq!(
            outcome,
            TcpOutcome::Connected,
            "fail-open blocks new connections"
        );
    }
}

/// Rules and a set that belong to someone else, installed before the agent.
fn install_foreign_state(lab: &Lab) {
    let node = lab.node();
    node.run(&["iptables", "-w", "-N", "OPERATOR-INPUT"]);
    node.run(&[
        "iptables",
        "-w",
        "-A",
        "OPERATOR-INPUT",
        "-s",
        "192.0.2.1",
        "-j",
        "DROP",
    ]);
    node.run(&["iptables", "-w", "-A", "INPUT", "-j", "OPERATOR-INPUT"]);
    node.run(&[
        "iptables", "-w", "-A", "FORWARD", "-p", "udp", "--dport", "9", "-j", "DROP",
    ]);
    node.run(&[
        "ip6tables",
        "-w",
        "-A",
        "INPUT",
        "-s",
        "2001:db8::1",
        "-j",
        "DROP",
    ]);
    node.run(&["ipset", "create", "operator-set", "hash:ip"]);
    node.run(&["ipset", "add", "operator-set", "192.0.2.7"]);
}

/// A policy set that exercises ingress, egress, ipBlock and Pod peers, so
/// the agent creates chains and sets of every kind it has.
fn rich_policies(lab: &Lab) {
    lab.write_policy(
        "inventory.yaml",
        &docs(&[
            namespace("prod", &[("env", "prod")]),
            pod(
                "web",
                "prod",
                &[("app", "web")],
                &[lab.addr("server").into()],
            ),
        ]),
    );
    lab.write_policy(
        "policies.yaml",
        &docs(&[
            node_policy(
                "node-rules",
                "securityops",
                5,
                &format!(
                    "  ingress:
    - name: drop-doc-net
      action: Drop
      from:
        - ipBlock:
            cidr: 192.0.2.0/24
    - name: drop-8001
      action: Drop
      ports:
{}  egress:
    - name: reject-doc-net
      action: Reject
      to:
        - ipBlock:
            cidr: 198.51.100.0/24
",
                    tcp_ports(&[8001])
                ),
            ),
            pod_policy(
                "web-rules",
                "application",
                5,
                "web",
                "  ingress:
    - name: drop-from-doc-net
      action: Drop
      from:
        - ipBlock:
            cidr: 203.0.113.0/24
",
            ),
        ]),
    );
}

#[test]
fn clean_shutdown_restores_firewall() {
    let Some(lab) = Lab::builder("clean_shutdown_restores_firewall")
        .peer("client")
        .peer("server")
        .ipv6()
        .build()
    else {
        return;
    };
    install_foreign_state(&lab);
    let before = lab.firewall_state("node");
    rich_policies(&lab);
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);

    let running = lab.firewall_state("node");
    assert_eq!(
        running.jumps("INPUT", "TOLLGATE-INPUT"),
        [1, 1],
        "{running}"
    );
    for line in before.rules() {
        assert!(
            running.rules().any(|l| l == line),
            "foreign rule {line:?} changed while running:\n{running}"
        );
    }
    assert!(
        running.ipsets.contains("create operator-set "),
        "foreign set touched:\n{running}"
    );

    let status = agent.terminate();
    assert!(status.success(), "agent exit status {status}");
    assert!(
        agent.count_log("shutdown complete") == 1,
        "log:\n{}",
        agent.log()
    );
    // The rules stay in force after a clean stop; `tollgate cleanup`
    // removes them and nothing else.
    let kept = lab.firewall_state("node");
    assert_eq!(kept.jumps("INPUT", "TOLLGATE-INPUT"), [1, 1], "{kept}");
    let cleaned = lab.tollgate_cleanup();
    assert!(cleaned.success(), "{cleaned:?}");
    let after = lab.firewall_state("node");
    assert_eq!(after, before, "left behind:\n{after}\nexpected:\n{before}");
}

/// Mutation (tried, issue 29): an adopting agent whose workers decide by
/// an empty ruleset fails it (the fresh connection to the dropped 8001
/// connects).
#[test]
fn restart_after_kill_leaves_no_duplicates() {
    let Some(lab) = Lab::builder("restart_after_kill_leaves_no_duplicates")
        .peer("client")
        .peer("server")
        .fresh_sources()
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8001, Service::Echo);
    lab.serve_tcp("node", 8080, Service::Echo);
    install_foreign_state(&lab);
    let pristine = lab.firewall_state("node");
    rich_policies(&lab);

    let mut first = lab.start_agent(lab.agent_options());
    first.wait_generation(1);
    let installed = lab.firewall_state("node");
    let node = lab.node_addr("client");
    // The client's own tuples, decided twice: cached.
    for _ in 0..2 {
        lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);
    }
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.wait_cached(
        "client",
        &[(sock(node, 8080), 'a'), (sock(node, 8001), 'd')],
    );
    first.kill9();
    let mut second = lab.start_agent(lab.agent_options());
    second.wait_generation(1);
    let reinstalled = lab.firewall_state("node");

    for chain in ["INPUT", "OUTPUT", "FORWARD"] {
        let target = format!("TOLLGATE-{chain}");
        assert!(
            reinstalled.jumps(chain, &target).iter().all(|n| *n <= 1),
            "duplicate jumps to {target}:\n{reinstalled}"
        );
        assert_eq!(
            reinstalled.jumps(chain, &target),
            installed.jumps(chain, &target),
            "{chain}"
        );
    }
    assert!(
        reinstalled.duplicate_rules().is_empty(),
        "duplicated rules: {:?}",
        reinstalled.duplicate_rules()
    );
    assert_eq!(
        reinstalled.set_names(),
        installed.set_names(),
        "ipsets after restart differ"
    );
    // The new agent decides fresh tuples by the policy; the kernel answers
    // the cached ones alike.
    lab.assert_tcp_fresh("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.assert_tcp_fresh("client", sock(node, 8080), TcpOutcome::Connected);
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(node, 8080), TcpOutcome::Connected);

    assert!(second.terminate().success());
    assert!(lab.tollgate_cleanup().success());
    let after = lab.firewall_state("node");
    assert_eq!(
        after, pristine,
        "left behind:\n{after}\nexpected:\n{pristine}"
    );
}

/// Mutation (tried, issue 29): a reload that changes nothing (here: a
/// rejected one) leaving the workers an empty ruleset fails it (the fresh
/// connection to the dropped 8001 connects; the client's own tuple is
/// still dropped by the cache).
#[test]
fn reload_rejects_invalid_and_applies_valid() {
    let Some(lab) = Lab::builder("reload_rejects_invalid_and_applies_valid")
        .peer("client")
        .fresh_sources()
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8001, Service::Echo);
    lab.serve_tcp("node", 8002, Service::Echo);
    let drop_port = |port: u16| {
        node_policy(
            "node-ingress",
            "securityops",
            5,
            &format!(
                "  ingress:
    - name: drop-one
      action: Drop
      ports:
{}",
                tcp_ports(&[port])
            ),
        )
    };
    lab.write_policy("node.yaml", &drop_port(8001));
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    let node = lab.node_addr("client");
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::Connected);

    // Pass is not allowed in the baseline tier: the whole change is refused.
    let invalid = node_policy(
        "node-ingress",
        "baseline",
        5,
        "  ingress:
    - name: pass-all
      action: Pass
",
    );
    lab.write_policy("node.yaml", &invalid);
    // The rejection names the file, the field and the problem.
    let line = agent.wait_for_log("reload rejected:", AGENT_WAIT);
    for part in [
        "node.yaml",
        "spec.ingress[0].action",
        "Pass is not allowed in the baseline Tier",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    // The client's own tuples (8001 cached by now) and fresh ones, which
    // only the workers can decide: by the ruleset in force.
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::Connected);
    lab.assert_tcp_fresh("client", sock(node, 8001), TcpOutcome::TimedOut);
    lab.assert_tcp_fresh("client", sock(node, 8002), TcpOutcome::Connected);
    assert_eq!(agent.count_log("ruleset applied generation="), 1);

    lab.write_policy("node.yaml", &drop_port(8002));
    agent.wait_generation(2);
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::TimedOut);
}

/// Mutation (tried, issue 29): a SIGHUP that changes nothing leaving the
/// workers an empty ruleset fails it (client2's connection to 8081
/// connects; its cached tuple to 8080 is still dropped by the kernel).
#[test]
fn inventory_change_and_sighup_reload() {
    let Some(lab) = Lab::builder("inventory_change_and_sighup_reload")
        .peer("client")
        .peer("server")
        .peer("client2")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    // Probed only after the SIGHUP: tuples no worker decided before.
    lab.serve_tcp("server", 8081, Service::Echo);
    // client2 stays an app=client Pod throughout: the denied probe.
    let inventory = |client_app: &str| {
        docs(&[
            namespace("prod", &[("env", "prod")]),
            pod(
                "client",
                "prod",
                &[("app", client_app)],
                &[lab.addr("client").into()],
            ),
            pod(
                "client2",
                "prod",
                &[("app", "client")],
                &[lab.addr("client2").into()],
            ),
            pod(
                "web",
                "prod",
                &[("app", "web")],
                &[lab.addr("server").into()],
            ),
        ])
    };
    lab.write_policy("inventory.yaml", &inventory("client"));
    lab.write_policy(
        "web.yaml",
        &pod_policy(
            "web-no-clients",
            "application",
            5,
            "web",
            "  ingress:
    - name: drop-clients
      action: Drop
      from:
        - podSelector:
            matchLabels:
              app: client
",
        ),
    );
    let web = sock(lab.addr("server"), 8080);
    // Before the agent: both clients reach web.
    for client in ["client", "client2"] {
        lab.assert_tcp(client, web, TcpOutcome::Connected);
    }
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    lab.assert_tcp("client", web, TcpOutcome::TimedOut);
    lab.assert_tcp("client2", web, TcpOutcome::TimedOut);

    // Relabelling the Pod is a change like any other: selectors re-resolve.
    lab.write_policy("inventory.yaml", &inventory("batch"));
    agent.wait_generation(2);
    lab.assert_tcp("client", web, TcpOutcome::Connected);
    lab.assert_tcp("client2", web, TcpOutcome::TimedOut);

    // SIGHUP reloads the same directory: a new generation, nothing to
    // change in the kernel, same verdicts (the denial included). The
    // verdict cache keeps its sets (same inputs), so client2's tuple to
    // 8080 (two decisions: the SYN and its retransmission) is answered by
    // the kernel; port 8081, never probed, is decided by the workers.
    agent.reload();
    let line = agent.wait_generation(3);
    assert!(line.contains("changed=false"), "{line}");
    let fresh = sock(lab.addr("server"), 8081);
    lab.assert_tcp("client", web, TcpOutcome::Connected);
    lab.assert_tcp("client2", web, TcpOutcome::TimedOut);
    lab.assert_tcp("client", fresh, TcpOutcome::Connected);
    lab.assert_tcp("client2", fresh, TcpOutcome::TimedOut);
}

#[test]
fn pod_egress_to_node_selector_dropped() {
    let Some(lab) = Lab::builder("pod_egress_to_node_selector_dropped")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 6443, Service::Echo);
    lab.serve_tcp("server", 6443, Service::Echo);
    lab.write_policy(
        "inventory.yaml",
        &docs(&[
            namespace("prod", &[("env", "prod")]),
            pod(
                "app",
                "prod",
                &[("app", "client")],
                &[lab.addr("client").into()],
            ),
        ]),
    );
    // The spec's "egress-control-plane" example: Pods may not reach the
    // API port of Nodes, whichever Node address they use.
    lab.write_policy(
        "control-plane.yaml",
        &pod_policy(
            "egress-control-plane",
            "securityops",
            1,
            "client",
            &format!(
                "  egress:
    - name: no-api-server
      action: Drop
      to:
        - nodeSelector:
            matchLabels:
              node-role.kubernetes.io/control-plane: \"\"
      ports:
{}",
                tcp_ports(&[6443])
            ),
        ),
    );
    // No `--node-address`: the Node's addresses are the ones on its
    // interfaces, which the agent reads itself (mutation, tried: that read
    // returning none → the client connects to the Node's 6443 → fails).
    let mut options = lab
        .agent_options()
        .label("node-role.kubernetes.io/control-plane", "");
    options.node_addresses.clear();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    lab.assert_tcp(
        "client",
        sock(lab.node_addr("client"), 6443),
        TcpOutcome::TimedOut,
    );
    lab.assert_tcp(
        "client",
        sock(lab.node_addr("server"), 6443),
        TcpOutcome::TimedOut,
    );
    // Not a Node address: allowed.
    lab.assert_tcp(
        "client",
        sock(lab.addr("server"), 6443),
        TcpOutcome::Connected,
    );
}

#[test]
fn interfaces_limit_enforcement() {
    let Some(lab) = Lab::builder("interfaces_limit_enforcement")
        .peer("client1")
        .peer("client2")
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Echo);
    lab.write_policy(
        "node.yaml",
        &node_policy(
            "node-ingress",
            "securityops",
            5,
            &format!(
                "  ingress:
    - name: drop-http
      action: Drop
      ports:
{}",
                tcp_ports(&[8080])
            ),
        ),
    );
    let mut options = lab.agent_options().queues(1);
    options.extra_args = vec!["--interfaces".into(), "n-client1".into()];
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    lab.assert_tcp(
        "client1",
        sock(lab.node_addr("client1"), 8080),
        TcpOutcome::TimedOut,
    );
    // Traffic arriving on another interface is not tollgate's to decide.
    lab.assert_tcp(
        "client2",
        sock(lab.node_addr("client2"), 8080),
        TcpOutcome::Connected,
    );
    let counters = lab.queue_counters();
    assert_eq!(
        counters.iter().map(|c| c.queue).collect::<Vec<_>>(),
        vec![100, 102, 103],
        "--queues 1 binds queue 100, and the two L7 queues after the DNS queue's 101"
    );
}

#[test]
fn node_protection_story() {
    let Some(lab) = Lab::builder("node_protection_story")
        .peer("admin")
        .peer("worker")
        .peer("outsider")
        .build()
    else {
        return;
    };
    for port in [22, 6443, 8080] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    // Another cluster Node, known from the inventory, lives at "worker".
    lab.write_policy(
        "nodes.yaml",
        &format!(
            "apiVersion: v1
kind: Node
metadata:
  name: worker-1
  labels:
    kubernetes.io/os: linux
    node-role.kubernetes.io/worker: \"\"
status:
  addresses:
    - type: InternalIP
      address: {}
",
            lab.addr("worker")
        ),
    );
    // User story 3: only the admin network and cluster Nodes reach 6443;
    // everything else to the Node is dropped.
    lab.write_policy(
        "protect.yaml",
        &node_policy(
            "protect-control-plane",
            "securityops",
            1,
            &format!(
                "  ingress:
    - name: admins-to-api
      action: Allow
      from:
        - ipBlock:
            cidr: {admin}
      ports:
{api}    - name: nodes-to-api
      action: Allow
      from:
        - nodeSelector:
            matchLabels:
              kubernetes.io/os: linux
      ports:
{api}    - name: drop-the-rest
      action: Drop
",
                admin = lab.subnet("admin"),
                api = tcp_ports(&[6443])
            ),
        ),
    );
    // The operator's SSH from anywhere in the lab stays open whatever the
    // policies say.
    let mut options = lab.agent_options();
    options.privileged.push("10.0.0.0/8,tcp/22".into());
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    for (who, api, ssh, other) in [
        (
            "admin",
            TcpOutcome::Connected,
            TcpOutcome::Connected,
            TcpOutcome::TimedOut,
        ),
        (
            "worker",
            TcpOutcome::Connected,
            TcpOutcome::Connected,
            TcpOutcome::TimedOut,
        ),
        (
            "outsider",
            TcpOutcome::TimedOut,
            TcpOutcome::Connected,
            TcpOutcome::TimedOut,
        ),
    ] {
        let node = lab.node_addr(who);
        lab.assert_tcp(who, sock(node, 6443), api);
        lab.assert_tcp(who, sock(node, 22), ssh);
        lab.assert_tcp(who, sock(node, 8080), other);
    }
}
