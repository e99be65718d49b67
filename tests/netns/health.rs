//! Health end to end: a worker made to panic (the debug-only fault switch
//! `TOLLGATE_FAULT_PANIC`) is restarted while `/livez` and `status --check
//! live` say so, and enforcement resumes on the wire; a stuck worker
//! (`TOLLGATE_FAULT_STALL`) makes the agent exit with code 3; `/readyz`
//! and `status --check ready` stay red until the first Kubernetes snapshot
//! is applied; idle clients of the metrics listener do not hold the
//! probes; a queue held by another process is named in the error.
//!
//! Addresses: the lab's own (`Lab::builder`); the metrics listener on the
//! node namespace's loopback, one port per test.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tollgate_fake_api::FakeApi;

use crate::harness::{poll_until, AgentOptions, Lab, Service, TcpOutcome, AGENT_WAIT};

fn sock(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// Node ingress: TCP 8001 allowed, 8002 dropped.
const NODE_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: node-ports
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - nodeSelector:
        matchLabels:
          kubernetes.io/os: linux
  ingress:
    - name: allow
      action: Allow
      ports:
        - protocol: TCP
          port: 8001
    - name: drop
      action: Drop
      ports:
        - protocol: TCP
          port: 8002
";

/// A node serving TCP 8001 and 8002 and a client routed to it, with
/// [`NODE_POLICY`].
fn node_lab(test: &'static str) -> Option<Lab> {
    let lab = Lab::builder(test).peer("client").ipv6().build()?;
    for port in [8001, 8002] {
        lab.serve_tcp("node", port, Service::Echo);
    }
    lab.write_policy("node.yaml", NODE_POLICY);
    Some(lab)
}

/// One connection queue (100), metrics on the node's loopback `port`,
/// without the verdict cache (the faults are triggered by packets a
/// worker must see, and repeated tuples would stay in the kernel).
fn options(lab: &Lab, port: u16) -> AgentOptions {
    lab.agent_options().queues(1).args(&[
        "--metrics-address",
        &format!("127.0.0.1:{port}"),
        "--verdict-cache",
        "off",
    ])
}

/// `GET path` from the metrics listener on the node's loopback: status
/// code and body.
fn get(lab: &Lab, port: u16, path: &str) -> (u16, String) {
    lab.node().enter(|| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read the answer");
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (code, body.to_string())
    })
}

/// `tollgate status --check probe` against the lab's agent: exit code,
/// stdout, stderr.
fn check(lab: &Lab, probe: &str) -> (Option<i32>, String, String) {
    let socket = lab.agent_options().status_socket;
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["status", "--check", probe, "--socket"])
        .arg(&socket)
        .output()
        .expect("run tollgate status");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Opens a connection from the client to `to` every 100 ms, sending an
/// HTTP request on it, until dropped.
struct Knocking {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Knocking {
    fn start(lab: &Lab, to: SocketAddr) -> Knocking {
        let stop = Arc::new(AtomicBool::new(false));
        let client = lab.ns("client").clone();
        let halt = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            client.enter(|| {
                while !halt.load(Ordering::SeqCst) {
                    if let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_millis(100)) {
                        let _ = s.write_all(b"GET /api/knock HTTP/1.1\r\nHost: x\r\n\r\n");
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        });
        Knocking {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Knocking {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Mutation (tried, issue 29): a restarted worker that holds its queue and
/// never reads it fails it (8001 times out, and the queue's counter would
/// not move).
#[test]
fn a_panicking_worker_is_restarted_and_livez_is_red_meanwhile() {
    let Some(lab) = node_lab("a_panicking_worker_is_restarted_and_livez_is_red_meanwhile") else {
        return;
    };
    let node = lab.node_addr("client");
    let mut options = options(&lab, 9471);
    options
        .env
        .push(("TOLLGATE_FAULT_PANIC".into(), "100:3".into()));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    assert_eq!(get(&lab, 9471, "/livez"), (200, "ok\n".into()));
    assert_eq!(
        check(&lab, "live"),
        (Some(0), "live\n".into(), String::new())
    );
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);

    // New connections until the third queued packet makes the worker
    // panic: from then until the restart, live is red on both probes.
    let knocking = Knocking::start(&lab, sock(node, 8001));
    let red = poll_until(AGENT_WAIT, || {
        let (code, body) = get(&lab, 9471, "/livez");
        (code == 503).then_some(body)
    })
    .unwrap_or_else(|| panic!("/livez never went red; log:\n{}", agent.log()));
    let (code, _, stderr) = check(&lab, "live");
    drop(knocking);
    assert!(
        red.starts_with(
            "queue 100: panicked: TOLLGATE_FAULT_PANIC: queue 100, packet 3; restarting in 1s"
        ),
        "{red}"
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.starts_with("not live: queue 100: panicked: TOLLGATE_FAULT_PANIC"),
        "{stderr}"
    );

    // Restarted in-process: live again, and enforcing on the wire.
    poll_until(AGENT_WAIT, || {
        (get(&lab, 9471, "/livez").0 == 200).then_some(())
    })
    .unwrap_or_else(|| panic!("/livez stayed red; log:\n{}", agent.log()));
    assert_eq!(check(&lab, "live").0, Some(0));
    // The verdict cache is off here (every connection meets the queue):
    // the restarted worker of the one queue decides both, and its
    // counter moves by their three packets (8002: the SYN and its
    // retransmission).
    let queued = || {
        lab.queue_counters()
            .iter()
            .find(|c| c.queue == 100)
            .map_or(0, |c| c.id_sequence)
    };
    let before = queued();
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);
    lab.assert_tcp("client", sock(node, 8002), TcpOutcome::TimedOut);
    assert!(
        queued() >= before + 3,
        "the restarted worker of queue 100 did not decide 8001 and 8002: {:?}",
        lab.queue_counters()
    );
    let (_, metrics) = get(&lab, 9471, "/metrics");
    assert_eq!(
        metric(&metrics, "tollgate_worker_restarts_total{queue=\"100\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert!(agent.exited().is_none(), "the agent kept running");
    let log = agent.stop();
    // The restart window, shown with `-- --nocapture` (the figure in the
    // report comes from this).
    for line in log
        .lines()
        .filter(|l| l.contains("worker panicked") || l.contains("worker restarted"))
    {
        eprintln!("{line}");
    }
    assert_eq!(
        log.matches("queue worker panicked: TOLLGATE_FAULT_PANIC: queue 100, packet 3; the packets it held were dropped; restarting in 1s")
            .count(),
        1,
        "{log}"
    );
}

/// Node ingress on TCP 8080: HTTP `GET /api/*` allowed, any other
/// request denied (403).
const L7_POLICY: &str = "apiVersion: crd.antrea.io/v1beta1
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

#[test]
fn a_panicking_l7_worker_is_restarted_too() {
    let Some(lab) = Lab::builder("a_panicking_l7_worker_is_restarted_too")
        .peer("client")
        .require(&["curl"])
        .build()
    else {
        return;
    };
    lab.serve_tcp("node", 8080, Service::Http);
    lab.write_policy("node.yaml", L7_POLICY);
    let node = lab.node_addr("client");
    let url = |path: &str| format!("http://{node}:8080{path}");
    // One connection queue (100): the DNS queue is 101, the L7 queue 102
    // (one L7 queue: the fault names it).
    let mut options = options(&lab, 9476).args(&["--l7-queues", "1"]);
    options
        .env
        .push(("TOLLGATE_FAULT_PANIC".into(), "102:5".into()));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    assert_eq!(lab.curl("client", &url("/api/a"), AGENT_WAIT), Ok(200));

    let knocking = Knocking::start(&lab, sock(node, 8080));
    let red = poll_until(AGENT_WAIT, || {
        let (code, body) = get(&lab, 9476, "/livez");
        (code == 503).then_some(body)
    })
    .unwrap_or_else(|| panic!("/livez never went red; log:\n{}", agent.log()));
    drop(knocking);
    assert!(
        red.starts_with("L7 queue 102: panicked: TOLLGATE_FAULT_PANIC: queue 102, packet 5;"),
        "{red}"
    );
    agent.wait_for_log("L7 queue worker restarted", AGENT_WAIT);
    assert_eq!(get(&lab, 9476, "/livez").0, 200);
    // Requests are matched again, one by one.
    assert_eq!(lab.curl("client", &url("/api/b"), AGENT_WAIT), Ok(200));
    assert_eq!(lab.curl("client", &url("/admin"), AGENT_WAIT), Ok(403));
    let (_, metrics) = get(&lab, 9476, "/metrics");
    assert_eq!(
        metric(&metrics, "tollgate_worker_restarts_total{queue=\"102\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "tollgate_worker_restarts_total{queue=\"100\"}"),
        Some(0.0),
        "{metrics}"
    );
    agent.stop();
}

#[test]
fn a_stalled_worker_makes_the_agent_exit_with_code_3() {
    let Some(lab) = node_lab("a_stalled_worker_makes_the_agent_exit_with_code_3") else {
        return;
    };
    let node = lab.node_addr("client");
    let mut options = options(&lab, 9472).args(&["--stall-timeout", "1"]);
    options
        .env
        .push(("TOLLGATE_FAULT_STALL".into(), "100:2".into()));
    let mut agent = lab.start_agent(options);
    agent.wait_generation(1);
    lab.assert_tcp("client", sock(node, 8001), TcpOutcome::Connected);
    // An idle queue never stalls, however long it is quiet: an absence,
    // shown by waiting twice the stall timeout (the only wait of its kind
    // here).
    std::thread::sleep(Duration::from_secs(2));
    assert!(agent.exited().is_none(), "log:\n{}", agent.log());
    assert_eq!(get(&lab, 9472, "/livez").0, 200);

    // The second packet is taken and never answered: the queue stalls.
    let _knocking = Knocking::start(&lab, sock(node, 8001));
    let status = agent.wait_exit(AGENT_WAIT);
    let log = agent.log();
    assert_eq!(status.code(), Some(3), "log:\n{log}");
    assert!(
        log.contains("queue worker stalled: no packet taken for"),
        "log:\n{log}"
    );
}

#[test]
fn readyz_is_red_until_the_first_kubernetes_snapshot_is_applied() {
    let Some(lab) = Lab::builder("readyz_is_red_until_the_first_kubernetes_snapshot_is_applied")
        .peer("client")
        .peer("server")
        .build()
    else {
        return;
    };
    lab.serve_tcp("server", 8080, Service::Echo);
    let server: IpAddr = lab.addr("server").into();
    // The link the later denial is seen on works (audit 3, L3).
    lab.assert_tcp("client", sock(server, 8080), TcpOutcome::Connected);
    let listener = lab
        .node()
        .enter(|| TcpListener::bind("127.0.0.1:0").expect("bind in node namespace"));
    let api = FakeApi::serve(listener);
    api.hold_lists();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}));
    api.apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
        "spec": {"nodeName": "node", "containers": [{"name": "main"}]},
        "status": {"podIP": server.to_string(), "podIPs": [{"ip": server.to_string()}]}}));
    api.apply(
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": "drop-clients"},
        "spec": {"priority": 5, "tier": "application",
                 "appliedTo": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                 "ingress": [{"name": "drop-clients", "action": "Drop",
                              "from": [{"ipBlock": {"cidr": lab.subnet("client")}}]}]}}),
    );
    let kubeconfig = lab.dir().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let mut options = options(&lab, 9473);
    options.kubeconfig = Some(kubeconfig);
    let mut agent = lab.start_agent(options);

    // The agent answers before it has a snapshot (no queue is bound and
    // no ruleset is in force yet): live, but not ready while the API
    // server holds its lists.
    poll_until(AGENT_WAIT, || {
        (check(&lab, "live").0 == Some(0)).then_some(())
    })
    .expect("the agent answers its probes while the lists are held");
    assert_eq!(
        get(&lab, 9473, "/readyz"),
        (503, "no complete policy snapshot applied yet\n".into())
    );
    assert_eq!(
        check(&lab, "ready"),
        (
            Some(1),
            String::new(),
            "not ready: no complete policy snapshot applied yet\n".into()
        )
    );
    assert_eq!(get(&lab, 9473, "/livez").0, 200);
    assert_eq!(check(&lab, "live").0, Some(0));

    // The lists come: the snapshot is applied, and only then ready.
    api.release_lists();
    agent.wait_generation(1);
    poll_until(AGENT_WAIT, || {
        (get(&lab, 9473, "/readyz").0 == 200).then_some(())
    })
    .unwrap_or_else(|| panic!("/readyz stayed red; log:\n{}", agent.log()));
    assert_eq!(
        check(&lab, "ready"),
        (Some(0), "ready\n".into(), String::new())
    );
    lab.assert_tcp("client", sock(server, 8080), TcpOutcome::TimedOut);

    // No agent: the probe cannot reach it (exit 2).
    agent.stop();
    let (code, _, stderr) = check(&lab, "ready");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is `tollgate run` running?"), "{stderr}");
}

#[test]
fn idle_metrics_clients_do_not_fail_the_probes() {
    let Some(lab) = node_lab("idle_metrics_clients_do_not_fail_the_probes") else {
        return;
    };
    let mut agent = lab.start_agent(options(&lab, 9474));
    agent.wait_generation(1);
    // Three connections that never send a request.
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| {
            lab.node()
                .enter(|| TcpStream::connect(("127.0.0.1", 9474)).expect("idle connection"))
        })
        .collect();
    let started = Instant::now();
    assert_eq!(get(&lab, 9474, "/livez"), (200, "ok\n".into()));
    assert_eq!(get(&lab, 9474, "/readyz"), (200, "ok\n".into()));
    let (code, metrics) = get(&lab, 9474, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metrics.contains("tollgate_ruleset_generation 1\n"),
        "{metrics}"
    );
    let took = started.elapsed();
    eprintln!("/livez, /readyz and /metrics behind 3 idle clients: {took:?}");
    assert!(
        took < Duration::from_secs(2),
        "the probes waited {took:?} behind idle clients"
    );
    drop(idle);
    agent.stop();
}

#[test]
fn a_queue_held_by_another_process_is_named_in_the_error() {
    let Some(lab) = node_lab("a_queue_held_by_another_process_is_named_in_the_error") else {
        return;
    };
    // Another process's socket (here: the test's own) holds queue 100.
    let holder = lab.node().enter(|| {
        tollgate::workers::Queue::open(tollgate::workers::QueueSpec {
            queue: 100,
            name: "holder",
            copy_range: 64,
            max_len: 16,
            fail_open: false,
            gso: false,
            receive_buffer: 0,
        })
        .expect("bind queue 100")
    });
    let mut agent = lab.start_agent(options(&lab, 9475));
    let status = agent.wait_exit(AGENT_WAIT);
    let log = agent.log();
    assert_eq!(status.code(), Some(2), "log:\n{log}");
    assert!(
        log.contains("queue 100 is already in use by another process (another tollgate agent?)"),
        "log:\n{log}"
    );
    assert!(!log.contains("Operation not permitted"), "log:\n{log}");
    drop(holder);
}
