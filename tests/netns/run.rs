//! `tollgate run` as a process, node and client joined by a veth pair
//! (10.78.0.0/24): start, enforcement, rejected and applied changes, an
//! established connection across a change, SIGHUP, SIGTERM and a restart
//! after `kill -9`; the agent keeps only its two network capabilities.

use std::net::SocketAddr;
use std::process::Command;

use crate::harness::probe::echo_roundtrip;
use crate::harness::{AgentOptions, Lab, Netns, Service, TcpOutcome, AGENT_WAIT, ALLOW_WAIT};

fn node_policy(action: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: protect-node
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          role: smoke
  ingress:
    - action: {action}
      from:
        - ipBlock:
            cidr: 10.78.0.0/24
      ports:
        - protocol: TCP
          port: 81
          endPort: 82
"
    )
}

fn owned_state(ns: &Netns) -> String {
    ns.ok("iptables-save -t filter; ip6tables-save -t filter; ipset list -n")
        .lines()
        .filter(|l| l.contains("TOLLGATE") || l.starts_with("tollgate-"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Node `smoke` labelled `role=smoke`, one queue, SSH from 10.78.0.9
/// privileged.
fn options(lab: &Lab) -> AgentOptions {
    let mut options = lab
        .agent_options()
        .node_name("smoke")
        .labels(&[("role", "smoke")])
        .queues(1);
    options.privileged.push("10.78.0.9,tcp/22".into());
    options
}

/// The node (10.78.0.1) and client (10.78.0.2) of `test`'s lab.
fn smoke_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test).unlinked("client").build()?;
    lab.node().ok(&format!(
        "ip link add va type veth peer name vb netns {} && \
         ip addr add 10.78.0.1/24 dev va && ip link set va up",
        lab.ns("client").name()
    ));
    lab.ns("client")
        .ok("ip addr add 10.78.0.2/24 dev vb && ip link set vb up");
    Some(lab)
}

#[test]
fn run_enforces_reloads_and_cleans_up() {
    let Some(lab) = smoke_lab("run_enforces_reloads_and_cleans_up") else {
        return;
    };
    let node = lab.node();
    for port in [80, 81, 82] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    let to = |port: u16| SocketAddr::from(([10, 78, 0, 1], port));
    lab.write_policy("policy.yaml", &node_policy("Reject"));

    let mut agent = lab.start_agent(options(&lab));
    agent.wait_generation(1);
    let state = owned_state(node);
    for expected in [
        ":TOLLGATE-INPUT - [0:0]",
        ":TOLLGATE-FORWARD - [0:0]",
        ":TOLLGATE-OUTPUT - [0:0]",
        "-A INPUT -j TOLLGATE-INPUT",
        "-A TOLLGATE-INPUT -s 10.78.0.9/32 -p tcp -m tcp --dport 22 -j ACCEPT",
        "-A TOLLGATE-INPUT -m conntrack --ctstate NEW -j NFQUEUE --queue-num 100",
        "tollgate-endpoints-v4",
        "tollgate-endpoints-v6",
    ] {
        assert!(state.contains(expected), "missing {expected:?} in\n{state}");
    }
    lab.assert_tcp("client", to(80), TcpOutcome::Connected);
    // The rule is Reject: a reset, not a timeout.
    lab.assert_tcp("client", to(81), TcpOutcome::Refused);

    // An invalid change is rejected and the ruleset in force stays.
    lab.write_policy("policy.yaml", &node_policy("Maybe"));
    agent.wait_for_log("reload rejected:", AGENT_WAIT);
    lab.assert_tcp("client", to(81), TcpOutcome::Refused);
    lab.assert_tcp("client", to(80), TcpOutcome::Connected);

    // A valid change is applied.
    lab.write_policy("policy.yaml", &node_policy("Allow"));
    agent.wait_generation(2);
    lab.assert_tcp("client", to(81), TcpOutcome::Connected);

    // A connection established while allowed survives a change that
    // denies new ones.
    let mut stream = lab.tcp_stream("client", to(82));
    assert!(echo_roundtrip(&mut stream, b"before", ALLOW_WAIT).expect("echo before"));
    lab.write_policy("policy.yaml", &node_policy("Reject"));
    agent.wait_generation(3);
    lab.assert_tcp("client", to(82), TcpOutcome::Refused);
    assert!(echo_roundtrip(&mut stream, b"after", ALLOW_WAIT).expect("echo after"));

    // SIGHUP reloads; the kernel already matches.
    agent.reload();
    agent.wait_for_log("ruleset applied generation=4 changed=false", AGENT_WAIT);

    agent.stop();
    assert_eq!(owned_state(node), "");

    // After kill -9 everything stays; the next start reconciles it.
    let mut crashed = lab.start_agent(options(&lab));
    crashed.wait_generation(1);
    crashed.kill9();
    let left = owned_state(node);
    assert!(left.contains("-A INPUT -j TOLLGATE-INPUT"), "{left}");
    let mut again = lab.start_agent(options(&lab));
    again.wait_for_log("ruleset applied generation=1 changed=false", AGENT_WAIT);
    assert_eq!(owned_state(node), left);
    again.signal(libc::SIGINT);
    let status = again.wait_exit(AGENT_WAIT);
    assert!(status.success(), "{status}\n{}", again.log());
    assert_eq!(owned_state(node), "");
}

/// The capability sets of process `pid`, as /proc prints them.
fn capability_sets(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("Cap") || l.starts_with("NoNewPrivs"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn agent_keeps_only_network_capabilities() {
    let Some(lab) = Lab::builder("agent_keeps_only_network_capabilities")
        .require(&["setpriv"])
        .build()
    else {
        return;
    };
    lab.write_policy("policy.yaml", &node_policy("Drop"));
    // A directory anyone may enter, so only the socket's own mode can keep
    // an unprivileged user out.
    let run_dir = lab.dir().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    for path in [lab.dir(), &run_dir] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let socket = run_dir.join("status.sock");
    let mut options = options(&lab);
    options.status_socket = socket.clone();
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);

    // CAP_NET_ADMIN (bit 12) and CAP_NET_RAW (bit 13), nothing else, in
    // every set of every thread; no exec can gain more.
    let expected = [
        "CapInh:\t0000000000003000",
        "CapPrm:\t0000000000003000",
        "CapEff:\t0000000000003000",
        "CapBnd:\t0000000000003000",
        "CapAmb:\t0000000000003000",
        "NoNewPrivs:\t1",
    ];
    let pid = agent.pid();
    let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| t.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert!(tasks.len() > 1, "worker threads expected: {tasks:?}");
    for task in tasks {
        assert_eq!(capability_sets(task), expected, "thread {task}");
    }
    agent.wait_for_log("capabilities reduced", AGENT_WAIT);

    // The status socket answers root and refuses everyone else.
    let status = |user: Option<&str>| {
        let mut command = match user {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    "--clear-groups",
                    env!("CARGO_BIN_EXE_tollgate"),
                ]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_tollgate")),
        };
        command
            .args(["status", "--socket", socket.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let root = status(None);
    assert!(root.status.success(), "{root:?}");
    let nobody = status(Some("65534"));
    assert!(!nobody.status.success(), "{nobody:?}");
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("Permission denied"),
        "{nobody:?}"
    );
}
