//! `tollgate run` as a process, in network namespaces this test creates
//! (root only; skipped otherwise): chains and sets appear on start, a node
//! policy is enforced, an invalid change is rejected and the previous
//! ruleset stays, a valid change is applied, an established connection
//! survives a change that denies new ones, SIGHUP reinstalls nothing,
//! SIGTERM removes everything, and a start after `kill -9` reconciles.

use crate::harness::{capture_stderr, is_root, wait_exit, wait_until, within, NetNs};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A running agent whose stderr is collected; killed on drop.
struct Agent {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Agent {
    fn start(ns: &NetNs, policies: &Path) -> Agent {
        Agent::start_with(ns, policies, &[])
    }

    fn start_with(ns: &NetNs, policies: &Path, extra: &[&str]) -> Agent {
        let mut child = ns
            .command(&[
                env!("CARGO_BIN_EXE_tollgate"),
                "run",
                "--policies",
                policies.to_str().unwrap(),
                "--node-name",
                "smoke",
                "--node-labels",
                "role=smoke",
                "--queues",
                "1",
                "--privileged",
                "10.78.0.9,tcp/22",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture_stderr(&mut child);
        Agent { child, log }
    }

    fn wait_log(&self, needle: &str) {
        wait_until(needle, Duration::from_secs(15), || {
            self.log.lock().unwrap().contains(needle)
        });
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success());
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        match wait_exit(&mut self.child, Duration::from_secs(15)) {
            Some(status) => status,
            None => panic!("agent did not exit:\n{}", self.log.lock().unwrap()),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

fn owned_state(ns: &NetNs) -> String {
    ns.ok("iptables-save -t filter; ip6tables-save -t filter; ipset list -n")
        .lines()
        .filter(|l| l.contains("TOLLGATE") || l.starts_with("tollgate-"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn run_enforces_reloads_and_cleans_up() {
    if !is_root() {
        return;
    }
    let node = NetNs::create("smoke-node");
    let client = NetNs::create("smoke-cli");
    node.ok(&format!(
        "ip link set lo up && ip link add va type veth peer name vb netns {} && \
         ip addr add 10.78.0.1/24 dev va && ip link set va up",
        client.0
    ));
    client.ok("ip link set lo up && ip addr add 10.78.0.2/24 dev vb && ip link set vb up");
    let _servers: Vec<Agent> = ["80", "81"]
        .iter()
        .map(|port| Agent {
            child: node
                .command(&["nc", "-lk", port])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
            log: Arc::default(),
        })
        .collect();
    wait_until("servers listening", Duration::from_secs(5), || {
        let listening = node.ok("ss -Htln");
        listening.contains(":80 ") && listening.contains(":81 ")
    });

    // An echo server on port 82, for a connection that outlives a change.
    let listener = within(&node, || TcpListener::bind("10.78.0.1:82").unwrap());
    std::thread::spawn(move || {
        if let Ok((mut conn, _)) = listener.accept() {
            let mut buf = [0u8; 64];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                if conn.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, node_policy("Reject")).unwrap();

    let mut agent = Agent::start(&node, dir.path());
    agent.wait_log("ruleset applied generation=1");
    let state = owned_state(&node);
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
    let connect = |port: &str| {
        client
            .sh(&format!("nc -z -w 2 10.78.0.1 {port}"))
            .status
            .success()
    };
    assert!(connect("80"));
    assert!(!connect("81"));

    // An invalid change is rejected and the ruleset in force stays.
    std::fs::write(&policy, node_policy("Maybe")).unwrap();
    agent.wait_log("reload rejected:");
    assert!(!connect("81"));

    // A valid change is applied.
    std::fs::write(&policy, node_policy("Allow")).unwrap();
    agent.wait_log("ruleset applied generation=2");
    assert!(connect("81"));

    // A connection established while allowed survives a change that
    // denies new ones.
    let mut stream = within(&client, || TcpStream::connect("10.78.0.1:82").unwrap());
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut echo = |text: &[u8]| {
        stream.write_all(text).unwrap();
        let mut back = vec![0u8; text.len()];
        stream.read_exact(&mut back).unwrap();
        assert_eq!(back, text);
    };
    echo(b"before");
    std::fs::write(&policy, node_policy("Reject")).unwrap();
    agent.wait_log("ruleset applied generation=3");
    assert!(!connect("82"));
    echo(b"after");

    // SIGHUP reloads; the kernel already matches.
    agent.signal("-HUP");
    agent.wait_log("ruleset applied generation=4 changed=false");

    agent.signal("-TERM");
    assert!(agent.wait_exit().success(), "{}", agent.log.lock().unwrap());
    agent.wait_log("shutdown complete");
    assert_eq!(owned_state(&node), "");

    // After kill -9 everything stays; the next start reconciles it.
    let mut crashed = Agent::start(&node, dir.path());
    crashed.wait_log("ruleset applied generation=1");
    crashed.signal("-KILL");
    crashed.wait_exit();
    let left = owned_state(&node);
    assert!(left.contains("-A INPUT -j TOLLGATE-INPUT"), "{left}");
    let mut again = Agent::start(&node, dir.path());
    again.wait_log("ruleset applied generation=1 changed=false");
    assert_eq!(owned_state(&node), left);
    again.signal("-INT");
    assert!(again.wait_exit().success());
    assert_eq!(owned_state(&node), "");
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
    if !is_root() {
        return;
    }
    let node = NetNs::create("smoke-caps");
    node.ok("ip link set lo up");
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("policy.yaml"), node_policy("Drop")).unwrap();
    // A directory anyone may enter, so only the socket's own mode can keep
    // an unprivileged user out.
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    for path in [dir.path(), &run_dir] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let socket = run_dir.join("status.sock");
    let agent = Agent::start_with(
        &node,
        &policies,
        &["--status-socket", socket.to_str().unwrap()],
    );
    agent.wait_log("ruleset applied generation=1");

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
    let pid = agent.child.id();
    let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| t.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert!(tasks.len() > 1, "worker threads expected: {tasks:?}");
    for task in tasks {
        assert_eq!(capability_sets(task), expected, "thread {task}");
    }
    agent.wait_log("capabilities reduced");

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
