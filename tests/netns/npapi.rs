//! The network-policy-api kinds on the wire (issue 16): an Admin-tier Deny
//! that an Antrea application-tier Allow cannot undo but a securityops
//! Allow can; a `Pass` handed to a Kubernetes NetworkPolicy; a Baseline
//! Deny undone by a Kubernetes NetworkPolicy; and a `domainNames` Accept
//! learned from a real DNS answer (dnsmasq, A and AAAA), with the API's
//! `*.` meaning (one or more whole labels: the apex is not allowed).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::harness::{wait_until, Lab, Service, TcpOutcome};

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// A Pod on the lab's node in Namespace `prod`.
fn pod(name: &str, labels: &str, ips: &[IpAddr]) -> String {
    let pod_ips: String = ips
        .iter()
        .map(|ip| format!("    - ip: \"{ip}\"\n"))
        .collect();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: prod
  labels: {labels}
spec:
  nodeName: node
status:
  podIP: \"{}\"
  podIPs:
{pod_ips}---
",
        ips[0]
    )
}

const PROD: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: prod
  labels: {env: prod}
---
";

#[test]
fn admin_deny_holds_against_application_allow_not_securityops_allow() {
    let Some(lab) =
        Lab::builder("admin_deny_holds_against_application_allow_not_securityops_allow")
            .peer("client1")
            .peer("client2")
            .peer("server")
            .ipv6()
            .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    // Under no rule: client1's allow probe (audit 3, L3).
    lab.serve_tcp("server", 8081, Service::Echo);
    let ips = |role: &str| -> Vec<IpAddr> { vec![lab.addr(role).into(), lab.addr6(role).into()] };
    lab.write_policy(
        "inventory.yaml",
        &format!(
            "{PROD}{}{}{}",
            pod("one", "{role: client, id: one}", &ips("client1")),
            pod("two", "{role: client, id: two}", &ips("client2")),
            pod("web", "{app: web}", &ips("server")),
        ),
    );
    lab.write_policy(
        "policies.yaml",
        "apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata:
  name: deny-clients-to-web
spec:
  tier: Admin
  priority: 1
  subject:
    pods:
      namespaceSelector: {matchLabels: {env: prod}}
      podSelector: {matchLabels: {app: web}}
  ingress:
  - name: deny-clients
    action: Deny
    from:
    - pods:
        namespaceSelector: {}
        podSelector: {matchLabels: {role: client}}
    protocols:
    - tcp: {destinationPort: {number: 8080}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: app-allow-one
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - action: Allow
    from: [{podSelector: {matchLabels: {id: one}}, namespaceSelector: {}}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: secops-allow-two
spec:
  priority: 1
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: web}}}]
  ingress:
  - action: Allow
    from: [{podSelector: {matchLabels: {id: two}}, namespaceSelector: {}}]
",
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    for web in [IpAddr::from(lab.addr("server")), lab.addr6("server").into()] {
        lab.assert_tcp("client1", sock(web, 8080), TcpOutcome::TimedOut);
        lab.assert_tcp("client1", sock(web, 8081), TcpOutcome::Connected);
        lab.assert_tcp("client2", sock(web, 8080), TcpOutcome::Connected);
    }
    // `trace` names the deciding object and its tier.
    let trace = lab.node().ok(&format!(
        "{} trace --policies {} --node-name node --node-labels kubernetes.io/os=linux --src {} --dst {} --protocol tcp --dst-port 8080",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.policy_dir().display(),
        lab.addr("client1"),
        lab.addr("server"),
    ));
    assert!(
        trace.contains("ClusterNetworkPolicy:deny-clients-to-web rule deny-clients (tier Admin)"),
        "{trace}"
    );
}

#[test]
fn admin_pass_goes_to_network_policy_and_baseline_deny_is_undone_by_it() {
    let Some(lab) =
        Lab::builder("admin_pass_goes_to_network_policy_and_baseline_deny_is_undone_by_it")
            .peer("client1")
            .peer("client2")
            .peer("web")
            .peer("db")
            .build()
    else {
        return;
    };
    for role in ["web", "db"] {
        lab.serve_tcp(role, 8080, Service::Echo);
    }
    // No policy selects the node: client2's allow probe (audit 3, L3).
    lab.serve_tcp("node", 9999, Service::Echo);
    let ip = |role: &str| -> Vec<IpAddr> { vec![lab.addr(role).into()] };
    lab.write_policy(
        "inventory.yaml",
        &format!(
            "{PROD}{}{}{}{}",
            pod("one", "{role: client, id: one}", &ip("client1")),
            pod("two", "{role: client, id: two}", &ip("client2")),
            pod("web", "{app: web}", &ip("web")),
            pod("db", "{app: db}", &ip("db")),
        ),
    );
    lab.write_policy(
        "policies.yaml",
        "apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata:
  name: web-admin
spec:
  tier: Admin
  priority: 10
  subject:
    pods:
      namespaceSelector: {}
      podSelector: {matchLabels: {app: web}}
  ingress:
  - name: pass-one
    action: Pass
    from:
    - pods:
        namespaceSelector: {}
        podSelector: {matchLabels: {id: one}}
  - name: deny-all
    action: Deny
    from:
    - namespaces: {}
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata:
  name: db-baseline
spec:
  tier: Baseline
  priority: 10
  subject:
    pods:
      namespaceSelector: {}
      podSelector: {matchLabels: {app: db}}
  ingress:
  - name: deny-all
    action: Deny
    from:
    - namespaces: {}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: clients-in
  namespace: prod
spec:
  podSelector:
    matchExpressions: [{key: app, operator: In, values: [web, db]}]
  policyTypes: [Ingress]
  ingress:
  - from:
    - podSelector: {matchLabels: {id: one}}
",
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    // web: one is passed to the NetworkPolicy, which allows it; two meets
    // the Admin Deny.
    lab.assert_tcp(
        "client1",
        sock(lab.addr("web"), 8080),
        TcpOutcome::Connected,
    );
    lab.assert_tcp("client2", sock(lab.addr("web"), 8080), TcpOutcome::TimedOut);
    lab.assert_tcp(
        "client2",
        sock(lab.node_addr("client2"), 9999),
        TcpOutcome::Connected,
    );
    // db: the NetworkPolicy selects it, so the Baseline Deny never applies
    // to one; two is dropped by the NetworkPolicy's isolation.
    lab.assert_tcp("client1", sock(lab.addr("db"), 8080), TcpOutcome::Connected);
    lab.assert_tcp("client2", sock(lab.addr("db"), 8080), TcpOutcome::TimedOut);

    // Without the NetworkPolicy: Pass reaches the Baseline tier (nothing
    // there for web: allowed), and the Baseline Deny holds db.
    let policies = std::fs::read_to_string(lab.policy_dir().join("policies.yaml")).unwrap();
    let without_network_policy = policies
        .split("---\napiVersion: networking.k8s.io/v1")
        .next()
        .unwrap();
    lab.write_policy("policies.yaml", without_network_policy);
    agent.wait_generation(2);
    lab.assert_tcp(
        "client1",
        sock(lab.addr("web"), 8080),
        TcpOutcome::Connected,
    );
    lab.assert_tcp("client2", sock(lab.addr("web"), 8080), TcpOutcome::TimedOut);
    lab.assert_tcp("client1", sock(lab.addr("db"), 8080), TcpOutcome::TimedOut);
}

#[test]
fn domain_names_accept_is_learned_from_a_real_dns_answer() {
    let Some(lab) = Lab::builder("domain_names_accept_is_learned_from_a_real_dns_answer")
        .unlinked("server")
        .unlinked("pod")
        .require(&["dnsmasq", "curl", "dig"])
        .build()
    else {
        return;
    };
    // node–server 10.62.0.0/24 and fd62::/64 (dnsmasq .2), web addresses
    // 10.62.1.0/24 and fd62:1::/64 on the server, node–pod 10.62.5.0/24
    // and fd62:5::/64 (the Pod is .2 / ::2).
    let (node, server, pod_ns) = (lab.node(), lab.ns("server"), lab.ns("pod"));
    node.ok(&format!(
        "sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv6.conf.all.forwarding=1 && \
         ip link add vs type veth peer name vn netns {s} && \
         ip link add vp type veth peer name vn netns {p} && \
         ip addr add 10.62.0.1/24 dev vs && ip addr add fd62::1/64 dev vs nodad && \
         ip link set vs up && \
         ip addr add 10.62.5.1/24 dev vp && ip addr add fd62:5::1/64 dev vp nodad && \
         ip link set vp up && \
         ip route add 10.62.1.0/24 via 10.62.0.2 && ip -6 route add fd62:1::/64 via fd62::2",
        s = server.name(),
        p = pod_ns.name()
    ));
    server.ok("ip link set vn up && ip addr add 10.62.0.2/24 dev vn && \
         ip addr add fd62::2/64 dev vn nodad && \
         ip route add local 10.62.1.0/24 dev lo && ip -6 route add local fd62:1::/64 dev lo && \
         ip route add 10.62.5.0/24 via 10.62.0.1 && ip -6 route add fd62:5::/64 via fd62::1");
    pod_ns.ok(
        "ip addr add 10.62.5.2/24 dev vn && ip addr add fd62:5::2/64 dev vn nodad && \
         ip link set vn up && \
         ip route add default via 10.62.5.1 && ip -6 route add default via fd62:5::1",
    );
    lab.resolv_conf(
        "pod",
        "nameserver 10.62.0.2\noptions timeout:1 attempts:3\n",
    );
    let zone = lab.dir().join("zone.conf");
    std::fs::write(
        &zone,
        "host-record=www.allowed.test,10.62.1.10\n\
         host-record=a.b.allowed.test,10.62.1.11\n\
         host-record=allowed.test,10.62.1.12\n\
         host-record=other.test,10.62.1.20\n\
         host-record=six.allowed.test,fd62:1::10\n\
         host-record=six.other.test,fd62:1::20\n",
    )
    .unwrap();
    lab.serve_tcp("server", 80, Service::Http);
    lab.spawn(
        "server",
        &[
            "dnsmasq",
            "--no-daemon",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--listen-address=10.62.0.2",
            "--user=root",
            "--local-ttl=300",
            &format!("--conf-file={}", zone.display()),
            &format!("--pid-file={}", lab.dir().join("dnsmasq.pid").display()),
        ],
    );
    wait_until("dnsmasq answers", Duration::from_secs(10), || {
        node.sh("dig +short +time=1 +tries=1 @10.62.0.2 www.allowed.test")
            .stdout
            .starts_with("10.62.1.10")
    });
    lab.write_policy(
        "policy.yaml",
        "apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: apps}}
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: apps
  labels: {app: client}
spec: {nodeName: node}
status:
  podIP: 10.62.5.2
  podIPs: [{ip: 10.62.5.2}, {ip: \"fd62:5::2\"}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata:
  name: apps-egress
spec:
  tier: Admin
  priority: 1
  subject:
    namespaces: {matchLabels: {team: apps}}
  egress:
  - name: dns
    action: Accept
    to: [{networks: [10.62.0.2/32]}]
    protocols: [{udp: {destinationPort: {number: 53}}}, {tcp: {destinationPort: {number: 53}}}]
  - name: allowed-names
    action: Accept
    to: [{domainNames: ['*.allowed.test']}]
  - name: deny-rest
    action: Deny
    to: [{networks: [0.0.0.0/0, \"::/0\"]}]
",
    );
    let mut agent = lab.start_agent(lab.agent_options());
    agent.wait_generation(1);
    // curl's own exit codes: 28, its timeout (a dropped connection); a
    // name that does not resolve would be 6, and must not pass for a
    // denial (audit 3, L2).
    const TIMED_OUT: Result<u16, i32> = Err(28);
    let curl = |url: &str| lab.curl("pod", url, Duration::from_secs(3));
    // Each name the Pod asks for resolves (through the node: the answers
    // are snooped, the resolver itself allowed).
    let resolves = |name: &str, rtype: &str, address: &str| {
        let answer = pod_ns.ok(&format!(
            "dig +short +time=2 +tries=2 @10.62.0.2 {name} {rtype}"
        ));
        assert_eq!(answer.trim(), address, "{name} {rtype}");
    };
    // Never resolved: the address alone is denied.
    assert_eq!(curl("http://10.62.1.10/"), TIMED_OUT);
    // Resolved through the snooped answer: allowed, then by address too.
    assert_eq!(curl("http://www.allowed.test/"), Ok(200));
    assert_eq!(curl("http://10.62.1.10/"), Ok(200));
    assert_eq!(curl("http://a.b.allowed.test/"), Ok(200));
    // `*.` is one or more whole labels: not the apex, not another name.
    resolves("allowed.test", "A", "10.62.1.12");
    assert_eq!(curl("http://allowed.test/"), TIMED_OUT);
    resolves("other.test", "A", "10.62.1.20");
    assert_eq!(curl("http://other.test/"), TIMED_OUT);
    // IPv6: AAAA answers are learned the same way (the names have AAAA
    // records only: curl connects over IPv6).
    assert_eq!(curl("http://[fd62:1::10]/"), TIMED_OUT);
    assert_eq!(curl("http://six.allowed.test/"), Ok(200));
    assert_eq!(curl("http://[fd62:1::10]/"), Ok(200));
    resolves("six.other.test", "AAAA", "fd62:1::20");
    assert_eq!(curl("http://six.other.test/"), TIMED_OUT);
    // The running agent's sets hold what the answers taught, and only
    // that.
    let learned = node.ok(&format!(
        "{} get fqdn -o wide --socket {} --policies {} --node-name node --node-labels kubernetes.io/os=linux",
        env!("CARGO_BIN_EXE_tollgate"),
        lab.agent_options().status_socket.display(),
        lab.policy_dir().display()
    ));
    assert!(learned.contains("*.allowed.test"), "{learned}");
    for address in ["10.62.1.10", "10.62.1.11", "fd62:1::10"] {
        assert!(
            learned.contains(address),
            "{address} not learned:\n{learned}"
        );
    }
    for address in ["10.62.1.12", "10.62.1.20", "fd62:1::20"] {
        assert!(!learned.contains(address), "{address} learned:\n{learned}");
    }
    agent.stop();
}
